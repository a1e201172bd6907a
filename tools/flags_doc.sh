#!/usr/bin/env bash
# Prints docs/flags.md: every program's --help, in one page, from the built
# binaries named as arguments (rdmaflow's subcommands each get their own
# section). tools/update_flags_doc.sh builds them and rewrites the page;
# tests:flags_doc_test runs this script on the test's binaries and fails when
# the page differs.
#   tools/flags_doc.sh PROGRAM...
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail

# section TITLE COMMAND...: the command's --help as a fenced block.
section() {
  local title=$1
  shift
  printf '\n## %s\n\n```text\n' "$title"
  "$@" --help
  printf '```\n'
}

cat <<'HEADER'
# Flags of every program

Generated from each program's `--help` by `tools/flags_doc.sh`; do not edit.
`tools/update_flags_doc.sh` rewrites it, and `tests:flags_doc_test` fails when
it is stale. docs/cli.md has the rules every program keeps (spelling, exit
status); docs/configuration.md the environment variables and transport
parameters.
HEADER
programs=()
for program in "$@"; do programs+=("$(basename "$program")|$program"); done
while IFS='|' read -r name program; do
  if [ "$name" = rdmaflow ]; then
    section rdmaflow "$program"
    for command in plan simulate calibrate info; do
      section "rdmaflow $command" "$program" "$command"
    done
  else
    section "$name" "$program"
  fi
done < <(printf '%s\n' "${programs[@]}" | LC_ALL=C sort -t'|' -k1,1)
