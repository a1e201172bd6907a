#!/usr/bin/env bash
# docs/flags.md is what tools/flags_doc.sh makes of the programs' --help now.
#   flags_doc_test.sh FLAGS_DOC_SH DOCS_FLAGS_MD PROGRAM...
set -uo pipefail
generator=$1 page=$2
shift 2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
if ! "$generator" "$@" > "$tmp/flags.md"; then
  echo "FAIL: tools/flags_doc.sh failed"
  exit 1
fi
if ! diff -u "$page" "$tmp/flags.md"; then
  echo "FAIL: docs/flags.md is stale: run tools/update_flags_doc.sh"
  exit 1
fi
echo "docs/flags.md matches the programs' --help ($(wc -l < "$page") lines)"
