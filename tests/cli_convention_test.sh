#!/usr/bin/env bash
# Every program keeps the command-line convention (docs/cli.md): --help
# exits 0 with the usage on stdout, --version prints "PROGRAM VERSION", an
# unknown flag and a bad value are usage errors (exit 2, a message on
# stderr naming the flag), whichever spelling (dashes or underscores).
#   cli_convention_test.sh VERSION PROGRAM... -- CASE...
# A CASE is "PROGRAM|EXIT|PATTERN|ARGS": running PROGRAM (its basename) with
# the space-separated ARGS must exit EXIT and print PATTERN (grep -E) on
# stderr.
set -uo pipefail
version=$1
shift
programs=()
while [ "$1" != "--" ]; do programs+=("$1"); shift; done
shift
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run PROGRAM ARGS...: sets rc; stdout and stderr in $tmp/out, $tmp/err.
run() {
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
}

for program in "${programs[@]}"; do
  name=$(basename "$program")
  run "$program" --help
  if [ "$rc" != 0 ] || [ "$(wc -l <"$tmp/out")" -lt 3 ]; then
    fail "$name --help: exit $rc, $(wc -l <"$tmp/out") lines on stdout (want 0, >= 3)"
    head -5 "$tmp/err"
  fi
  run "$program" --version
  if [ "$rc" != 0 ] || [ "$(cat "$tmp/out")" != "$name $version" ]; then
    fail "$name --version: exit $rc, printed '$(head -c 200 "$tmp/out")' (want 0, '$name $version')"
  fi
  for flag in --no_such_flag --no-such-flag; do
    run "$program" "$flag"
    if [ "$rc" != 2 ] || ! grep -q -- "$flag" "$tmp/err"; then
      fail "$name $flag: exit $rc, stderr '$(head -c 200 "$tmp/err")' (want 2, naming the flag)"
    fi
  done
  echo "ok: $name --help, --version, an unknown flag"
done

for case in "$@"; do
  IFS='|' read -r name want pattern args <<<"$case"
  program=""
  for p in "${programs[@]}"; do [ "$(basename "$p")" = "$name" ] && program=$p; done
  if [ -z "$program" ]; then fail "case '$case': no program $name"; continue; fi
  # shellcheck disable=SC2086 # ARGS is a space-separated list.
  run "$program" $args
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pattern" "$tmp/err"; then
    fail "$name $args: exit $rc, stderr '$(head -c 300 "$tmp/err")' (want $want and /$pattern/)"
  else
    echo "ok: $name $args -> exit $rc"
  fi
done

if [ "$failures" != 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all programs keep the convention"
