#!/usr/bin/env bash
# Sets up and runs the whole test suite and the fuzzers (bounded time), then
# prints a one-line summary ("N passed, N failed"). Tests needing RDMA hardware or a GPU are tagged
# requires-rdma / requires-gpu and filtered out by .bazelrc.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# Count gtest cases from the XML reports of the targets this run reported
# (cached ones included); a target that failed without a report counts as one
# failed case.
summary=$(python3 - "$log" <<'PY'
import os, re, sys
import xml.etree.ElementTree as ET
passed = failed = skipped = targets = 0
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^//([^ :]*):(\S+)\s+(\(cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS)", line)
    if not m:
        continue
    targets += 1
    xml = os.path.join("bazel-testlogs", m.group(1), m.group(2), "test.xml")
    try:
        cases = ET.parse(xml).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        cases = []
    seen = 0
    for case in cases:
        seen += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if seen == 0:
        if m.group(4) == "PASSED":
            passed += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped ({targets} test targets)")
PY
)
build_failed=$(grep -c 'FAILED TO BUILD' "$log")

# The libFuzzer targets, for a bounded time (FUZZ_SECONDS, default 30;
# 0 skips them).
fuzz_status=0
fuzz_summary="skipped (FUZZ_SECONDS=0)"
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  if tools/fuzz.sh; then
    fuzz_summary="graph_text_fuzzer passed (${FUZZ_SECONDS:-30}s)"
  else
    fuzz_summary="graph_text_fuzzer FAILED"
    fuzz_status=1
  fi
fi
rm -f "$log"
echo
if [ "$build_failed" -ne 0 ]; then
  echo "bazel: $build_failed test targets failed to build"
fi
if [ "$status" -ne 0 ]; then
  echo "bazel test exited with status $status"
fi
echo "fuzz: ${fuzz_summary}"
echo "tests: ${summary}"
[ "$status" -ne 0 ] || status=$fuzz_status
exit "$status"
