#!/usr/bin/env bash
# Sets up and runs the whole test suite, then prints a one-line summary
# ("tests: N passed, N failed, N skipped (M test targets)") and the time each
# phase took ("times: setup N s, bazel test N s, ...; total N s"):
#   1. bazel test //... (tests tagged requires-rdma / requires-gpu are
#      filtered out by .bazelrc);
#   2. the libFuzzer targets for FUZZ_SECONDS (default 30 each; 0 skips),
#      then clang's thread-safety analysis of every file that holds an
#      absl::Mutex (tools/thread_safety_check.sh; THREAD_SAFETY=0 skips);
#   3. the `hostile` and `slow_peer` suites and the conformance tests under
#      AddressSanitizer + UBSan (tools/sanitize.sh; SANITIZE=0 skips);
#   4. the requires-rdma tests inside a Soft-RoCE VM (tools/rdma_tests.sh;
#      RDMA_TESTS=0 skips; they count as skipped where no VM can run);
#   5. the layering rules (tools/layering_check.sh: each rule's breaking
#      probe must fail to build; docs/architecture.md's package table must
#      be what `bazel query` says), and the docs against the code
#      (tools/docs_check.py: docs/configuration.md's variables and transport
#      parameters, every file the README and docs/ link or name, the
#      commands of README.md and docs/quickstart.md; DOCS_CHECK=0 skips it);
#   6. rdmaflow as a dependency of another Bazel workspace
#      (tools/consumer_check.sh: examples/bazel_consumer in an output base
#      of its own, kept between runs; CONSUMER_CHECK=0 skips).
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
cd "$(dirname "$0")/.."

# How long each phase took, printed last ("times: ..."), so that the 45-minute
# budget of a fresh clone can be watched phase by phase.
times=()
phase_start=$SECONDS
end_phase() {
  times+=("$1 $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}

tools/setup.sh || exit 1
end_phase setup

log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
build_failed=$(grep -c 'FAILED TO BUILD' "$log")
end_phase "bazel test"

# run_check <name> <enabled> <summary prefix> <script>: runs a check script
# that ends with a "<prefix>: ..." line, unless <enabled> is 0; sets
# <name>_status and <name>_summary.
# (Its locals start with an underscore, so no <name> can collide with them.)
run_check() {
  local _name=$1 _enabled=$2 _prefix=$3 _script=$4 _out _status=0
  local _summary="$_prefix: skipped"
  if [ "$_enabled" != 0 ]; then
    _out=$(mktemp)
    "$_script" | tee "$_out"
    _status=${PIPESTATUS[0]}
    _summary=$(grep "^$_prefix: " "$_out" | tail -1)
    _summary=${_summary:-"$_prefix: did not run"}
    rm -f "$_out"
  fi
  printf -v "${_name}_status" '%s' "$_status"
  printf -v "${_name}_summary" '%s' "$_summary"
}

run_check layering 1 layering tools/layering_check.sh
end_phase layering
run_check docs "${DOCS_CHECK:-1}" docs tools/docs_check.py
end_phase docs
run_check consumer "${CONSUMER_CHECK:-1}" "bazel consumer" tools/consumer_check.sh
end_phase consumer

fuzz_status=0
fuzz_summary="skipped (FUZZ_SECONDS=0)"
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  if tools/fuzz.sh; then
    fuzz_summary="graph_text_fuzzer, piece_stream_fuzzer, sparse_message_fuzzer, descriptor_fuzzer, handshake_fuzzer, envelope_fuzzer passed (${FUZZ_SECONDS:-30}s each)"
  else
    fuzz_summary="FAILED (see above)"
    fuzz_status=1
  fi
fi
end_phase fuzz

run_check thread_safety "${THREAD_SAFETY:-1}" "thread safety" tools/thread_safety_check.sh
end_phase "thread safety"

run_check sanitize "${SANITIZE:-1}" sanitizers tools/sanitize.sh
end_phase sanitizers

rdma_status=0
rm -rf bazel-rdma-testlogs
if [ "${RDMA_TESTS:-1}" != 0 ]; then
  tools/rdma_tests.sh | tee -a "$log"
  rdma_status=${PIPESTATUS[0]}
fi
rdma_summary=$(grep '^rdma tests: ' "$log" | tail -1)
end_phase "rdma VM"

# Count gtest cases from the XML reports of the targets this run reported
# (cached ones included) and of the VM's tests; a target that failed without
# a report counts as one failed case.
summary=$(python3 - "$log" <<'PY'
import glob, os, re, sys
import xml.etree.ElementTree as ET
passed = failed = skipped = targets = 0
def count(xml, fallback_passed):
    global passed, failed, skipped
    try:
        cases = list(ET.parse(xml).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        cases = []
    for case in cases:
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if not cases:
        if fallback_passed:
            passed += 1
        else:
            failed += 1
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^//([^ :]*):(\S+)\s+(\(cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS)", line)
    if not m:
        continue
    targets += 1
    logs = os.path.join("bazel-testlogs", m.group(1), m.group(2))
    # A sharded target has a report per shard.
    xmls = sorted(glob.glob(os.path.join(logs, "shard_*_of_*", "test.xml")))
    if not xmls:
        count(os.path.join(logs, "test.xml"), m.group(4) == "PASSED")
    for xml in xmls:
        count(xml, m.group(4) == "PASSED")
for xml in sorted(glob.glob("bazel-rdma-testlogs/*.xml")):
    targets += 1
    count(xml, False)
print(f"{passed} passed, {failed} failed, {skipped} skipped ({targets} test targets)")
PY
)
rm -f "$log"
echo
if [ "$build_failed" -ne 0 ]; then
  echo "bazel: $build_failed test targets failed to build"
fi
if [ "$status" -ne 0 ]; then
  echo "bazel test exited with status $status"
fi
echo "${layering_summary}"
echo "${docs_summary}"
echo "${consumer_summary}"
echo "fuzz: ${fuzz_summary}"
echo "${thread_safety_summary}"
echo "${sanitize_summary}"
echo "${rdma_summary:-rdma tests: skipped (RDMA_TESTS=0)}"
echo "tests: ${summary}"
times_line=$(printf '%s, ' "${times[@]}")
echo "times: ${times_line%, }; total $SECONDS s"
[ "$status" -ne 0 ] || status=$layering_status
[ "$status" -ne 0 ] || status=$docs_status
[ "$status" -ne 0 ] || status=$consumer_status
[ "$status" -ne 0 ] || status=$fuzz_status
[ "$status" -ne 0 ] || status=$thread_safety_status
[ "$status" -ne 0 ] || status=$sanitize_status
[ "$status" -ne 0 ] || status=$rdma_status
exit "$status"
