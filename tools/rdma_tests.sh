#!/usr/bin/env bash
# Builds every test tagged `requires-rdma` and runs them all inside one
# Soft-RoCE VM (tools/rxe_vm/run.sh): real kernel RDMA verbs on a machine
# without an RDMA NIC. Each test writes its gtest XML report to
# bazel-rdma-testlogs/, which tools/test.sh counts.
#
# Exit status: 0 when every test passed, or when the VM cannot run here (the
# reason is printed, the tests count as skipped; RDMAFLOW_REQUIRE_RDMA=1
# makes that a failure); 1 when a test failed.
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
cd "$(dirname "$0")/.."
logs=bazel-rdma-testlogs
rm -rf "$logs"
mkdir -p "$logs"

# Not //...: a query would wander into bazel-<checkout> symlinks.
targets=$(bazel query 'attr(tags, "requires-rdma", tests(//rdma/... + //tests/...))' 2>/dev/null)
if [ -z "$targets" ]; then
  echo "rdma tests: none"
  exit 0
fi
if ! bazel build $targets >"$logs/build.log" 2>&1; then
  tail -30 "$logs/build.log"
  echo "rdma tests: build FAILED"
  exit 1
fi

# The script the guest runs: every test binary, one after the other.
script="$logs/run_all.sh"
{
  echo "status=0"
  for target in $targets; do
    path=${target#//}
    path=${path/://}
    name=$(echo "$path" | tr '/' '_')
    echo "echo '=== $target'"
    echo "bazel-bin/$path --gtest_output=xml:$logs/$name.xml || status=1"
  done
  echo "exit \$status"
} >"$script"

echo "rdma tests: running $(echo $targets | wc -w) test target(s) in the Soft-RoCE VM"
tools/rxe_vm/run.sh "sh $script" 2>&1 | grep -v '^busybox: ' | tee "$logs/vm.log" |
  grep -E '^(===|\[  (PASSED|FAILED|SKIPPED) |\[       OK|\[ RUN|rxe-vm:|\[rxe-vm)' 
status=${PIPESTATUS[0]}
case $status in
  0) echo "rdma tests: passed"; exit 0 ;;
  124|125)
    echo "rdma tests: SKIPPED: the Soft-RoCE VM could not run here (status $status; see $logs/vm.log)"
    rm -f "$logs"/*.xml
    [ "${RDMAFLOW_REQUIRE_RDMA:-0}" = 1 ] && exit 1
    exit 0 ;;
  *) echo "rdma tests: FAILED (status $status; full output in $logs/vm.log)"; exit 1 ;;
esac
