#!/usr/bin/env bash
# Builds every program and rewrites docs/flags.md from their --help
# (tools/flags_doc.sh). Run it after changing a flag or a usage text;
# tests:flags_doc_test fails until you do.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
# The programs tests:cli_convention_test runs (tests/BUILD.bazel, _CLI_PROGRAMS).
programs=$(bazel query 'labels(data, //tests:cli_convention_test)' 2>/dev/null)
[ -n "$programs" ] || { echo "update_flags_doc: bazel query found no programs" >&2; exit 1; }
# shellcheck disable=SC2086 # one label per word.
bazel build $programs
paths=()
for label in $programs; do
  paths+=("bazel-bin/$(sed -e 's|^//||' -e 's|:|/|' <<<"$label")")
done
tools/flags_doc.sh "${paths[@]}" > docs/flags.md
echo "wrote docs/flags.md ($(wc -l < docs/flags.md) lines)"
