#!/usr/bin/env bash
# Proves that another Bazel workspace can depend on rdmaflow in one step
# (docs/using_rdmaflow.md): builds examples/bazel_consumer (its own
# WORKSPACE: local_repository + rdmaflow_deps(), and its own .bazelrc
# without rdmaflow's flags) offline, together with
# every public library of rdmaflow (the c10d backend, the runtime, the
# transports, ...; the Python module, the tool and //:install are built by
# the wheel, CLI and CMake tests); runs its
# two_rank_write with two ranks under plain torchrun; then checks that
# targets of rdmaflow's that are not public are refused (visibility). Prints
# "bazel consumer: passed (...)" or what failed, and exits non-zero on
# failure. The example's output base is its own, kept between runs (one per
# checkout, as Bazel keeps its own), so a run builds what changed; --clean
# builds in an empty one instead (minutes: most of rdmaflow from scratch).
#   tools/consumer_check.sh [--clean] [--keep]   (--keep: leave the logs and a clean output base)
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
keep=0
clean=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --clean) clean=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "consumer_check: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/rdmaflow-consumer.XXXXXX)
output_base=${CONSUMER_OUTPUT_BASE:-$HOME/.cache/rdmaflow-consumer/$(cd "$root" && pwd -P | md5sum | cut -c1-16)}
[ "$clean" = 1 ] && output_base="$work/output_base"
# consumer_bazel <seconds> <bazel arguments>: Bazel in the example's folder
# with its own output base, killed after <seconds>.
consumer_bazel() {
  local limit=$1; shift
  (cd "$root/examples/bazel_consumer" &&
   timeout --foreground -k 30 "$limit" bazel --output_base="$output_base" "$@")
}
probe="$root/examples/bazel_consumer/visibility_probe"
finish() {
  rm -rf "$probe"
  consumer_bazel 120 shutdown >/dev/null 2>&1
  if [ "$keep" = 0 ]; then
    chmod -R u+w "$work" 2>/dev/null
    rm -rf "$work"
  fi
}
trap finish EXIT
fail() { echo "bazel consumer: FAILED ($1)"; exit 1; }

start=$(date +%s)
echo "consumer_check: building examples/bazel_consumer in its output base ($output_base)"
# --symlink_prefix=/: no bazel-* links in the example's folder.
# Every library a consumer depends on (the root package's public targets);
# the Python module, the command-line tool and //:install are binaries the
# wheel, CLI and CMake tests build from this workspace.
libraries=(@rdmaflow//:rdma @rdmaflow//:transports @rdmaflow//:torch_store
           @rdmaflow//:graph_analyzer @rdmaflow//:runtime @rdmaflow//:compression
           @rdmaflow//:collectives @rdmaflow//:c10d)
if ! consumer_bazel 2400 build --symlink_prefix=/ //:two_rank_write "${libraries[@]}" \
    > "$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  fail "the build failed; log above"
fi
binary="$(consumer_bazel 120 info --symlink_prefix=/ bazel-bin 2>/dev/null)/two_rank_write"
[ -x "$binary" ] || fail "no binary at $binary"
built=$(( $(date +%s) - start ))

python=$("$root/tools/torch_python.sh") || fail "no Python with torch"
# TMPDIR: torchrun leaves its log folder (torchelastic_*) there.
TMPDIR="$work" RDMAFLOW_TRANSPORT_PARAMS=tls=shm timeout -k 20 300 "$python" -m torch.distributed.run \
  --rdzv_backend=c10d \
  --rdzv_endpoint=localhost:0 --rdzv_id="consumer-check-$$" --nnodes=1 \
  --nproc_per_node=2 --redirects 1 --tee 1 --no_python "$binary" ucx tls=shm \
  > "$work/run.log" 2>&1
status=$?
cat "$work/run.log"
[ "$status" = 0 ] || fail "two_rank_write exited with status $status"
grep -q 'every byte checked' "$work/run.log" || fail "two_rank_write did not check the data"

# Only the root package's targets are public: internal ones are refused,
# whether their package's default is //layers:internal or a layer's group.
for internal in @rdmaflow//rdma:blocking @rdmaflow//rdma/ucx:ucx_transport; do
  mkdir -p "$probe"
  cat > "$probe/BUILD.bazel" <<BUILD
# Written by tools/consumer_check.sh; removed when it ends.
cc_library(
    name = "probe",
    deps = ["$internal"],
)
BUILD
  if consumer_bazel 300 build --symlink_prefix=/ --nobuild //visibility_probe:probe \
      > "$work/probe.log" 2>&1; then
    fail "a workspace could depend on $internal, which is internal"
  fi
  grep -qF "'$internal' is not visible" "$work/probe.log" || {
    tail -20 "$work/probe.log"
    fail "the probe of $internal failed for another reason than visibility"
  }
done
echo "bazel consumer: passed (examples/bazel_consumer and rdmaflow's ${#libraries[@]} public libraries built offline in ${built} s (output base: $([ "$clean" = 1 ] && echo clean || echo kept)); two_rank_write over UCX shared memory; internal targets refused)"
