#!/usr/bin/env bash
# Sets up and runs the whole test suite, then prints a one-line summary
# ("N passed, N failed"). Tests needing RDMA hardware or a GPU are tagged
# requires-rdma / requires-gpu and filtered out by .bazelrc.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)|FAILED TO BUILD' "$log")
# Individual gtest cases skipped for a missing resource, with their reason.
skipped=$(find bazel-testlogs/ -name test.xml -newer "$log" -exec grep -ho '<testcase[^>]*result="skipped"' {} + 2>/dev/null | wc -l)
rm -f "$log"
echo
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "bazel test exited with status $status (build or configuration error)"
fi
exit "$status"
