#!/usr/bin/env bash
# Compiles every source file that holds state shared between threads (an
# absl::Mutex, or members ABSL_GUARDED_BY one, in the file or in its header)
# with clang and -Wthread-safety -Werror=thread-safety (bazel
# --config=thread_safety, one file at a time with --compile_one_dependency:
# no linking, no other sources). A member read or written without its
# mutex, a lock taken in the wrong order, or a function called without the
# lock it requires fails the build. Ends with "thread safety: ..." and
# exits non-zero on a failure. Uses the fuzz builds' output base (the same
# compiler); FUZZ_OUTPUT_BASE overrides it.
#
#   tools/thread_safety_check.sh
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
cd "$(dirname "$0")/.."
output_base=${FUZZ_OUTPUT_BASE:-$HOME/.cache/rdmaflow-fuzz/$(pwd -P | md5sum | cut -c1-16)}

pattern='absl::Mutex|ABSL_GUARDED_BY|ABSL_PT_GUARDED_BY|ABSL_EXCLUSIVE_LOCKS_REQUIRED'
dirs=(bench cli collectives common compression device graph_analyzer launch onesided rdma
      results runtime sim strategies tests torch_backend train)
files=()
while IFS= read -r source; do
  header=${source%.cc}.h
  if grep -qE "$pattern" "$source" || { [ -f "$header" ] && grep -qE "$pattern" "$header"; }; then
    files+=("$source")
  fi
done < <(find "${dirs[@]}" -name '*.cc' -not -name '*_test.cc' | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "thread safety: FAILED (no source file holds an absl::Mutex)"
  exit 1
fi
echo "thread safety: compiling ${#files[@]} files with clang -Werror=thread-safety"
log=$(mktemp)
if bazel --output_base="$output_base" build --config=thread_safety --symlink_prefix=/ \
  --compile_one_dependency --output_groups=compilation_outputs "${files[@]}" >"$log" 2>&1; then
  rm -f "$log"
  echo "thread safety: ${#files[@]} files checked by clang's thread-safety analysis"
  exit 0
fi
grep -E "error:|warning: .*thread-safety|ERROR" "$log" | head -40
rm -f "$log"
echo "thread safety: FAILED (see above)"
exit 1
