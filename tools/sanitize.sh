#!/usr/bin/env bash
# Runs the tests that feed hostile or late peer data to rdmaflow (bazel tags
# `hostile` and `slow_peer`) and the transport conformance suites under
# AddressSanitizer + UndefinedBehaviorSanitizer (bazel --config=asan), in an
# output base of their own so that the main build's cache stays warm.
# Prints "sanitizers: ..." and exits non-zero when a test fails.
# The strategies' slow-peer tests (5 targets, which pull in 30 libraries and
# the LibTorch communicator, a large share of the cold build) run only with
# SANITIZE_SCOPE=all: the give-up paths they reach lie in the layers below,
# whose own slow-peer and hostile tests always run.
#
#   tools/sanitize.sh                 # every such test but the strategies'
#   SANITIZE_SCOPE=all tools/sanitize.sh                  # every one
#   tools/sanitize.sh //onesided:messenger_hostile_test   # just these
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
cd "$(dirname "$0")/.."
output_base=${SANITIZE_OUTPUT_BASE:-$HOME/.cache/rdmaflow-asan/$(pwd -P | md5sum | cut -c1-16)}
bazel_asan=(bazel --output_base="$output_base")

if [ $# -gt 0 ]; then
  targets=("$@")
else
  # Asked of the main output base: another one would take its convenience
  # symlinks (bazel-<workspace>/...) for packages.
  # The c10d backend's tests are left out: its sources (LibTorch's
  # headers) take minutes to build again, LibTorch itself is not
  # instrumented, and the peer-facing code they reach lies in the layers
  # below, which the other targets cover (docs/testing.md).
  scope=${SANITIZE_SCOPE:-core}
  case "$scope" in
    core) skipped=' except attr(tags, "slow_peer", tests(//strategies/...))' ;;
    all) skipped='' ;;
    *) echo "sanitizers: FAILED (SANITIZE_SCOPE=$scope is neither core nor all)"; exit 2 ;;
  esac
  mapfile -t targets < <(bazel query --noshow_progress \
    'attr(tags, "(^|[ \[,])(hostile|slow_peer)([ \],]|$)", tests(//...))
       except rdeps(tests(//...), //torch_backend:process_group)'"$skipped")
  if [ ${#targets[@]} -eq 0 ]; then
    echo "sanitizers: FAILED (no hostile or slow_peer tests found)"
    exit 1
  fi
  # And the lifetimes ASan alone can see: UCX completions queued past
  # their endpoint, the overlap's communication thread.
  targets+=(//rdma/loopback:loopback_conformance_test //rdma/ucx:ucx_conformance_test
            //rdma/device:staged_conformance_test //rdma/ucx:ucx_transport_test
            //strategies:bucket_pipeline_test //strategies:communication_thread_test)
fi
echo "sanitizers: ${#targets[@]} test targets under ASan+UBSan"
log=$(mktemp)
status=0
"${bazel_asan[@]}" test --config=asan --symlink_prefix=/ \
  --test_tag_filters=-requires-rdma,-requires-gpu "${targets[@]}" >"$log" 2>&1 || status=$?
grep -E "^//|^Executed|ERROR|FAILED TO BUILD" "$log" || true
passed=$(grep -cE "^//\S+\s+(\(cached\) )?PASSED" "$log")
failed=$(grep -cE "^//\S+\s+(\(cached\) )?(FAILED|TIMEOUT|NO STATUS)|FAILED TO BUILD" "$log")
rm -f "$log"
if [ "$status" -ne 0 ]; then
  testlogs=$("${bazel_asan[@]}" info --config=asan bazel-testlogs 2>/dev/null)
  echo "sanitizers: FAILED ($passed passed, $failed failed; logs under $testlogs)"
  exit "$status"
fi
echo "sanitizers: $passed test targets passed under ASan+UBSan"
