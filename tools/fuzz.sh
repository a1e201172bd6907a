#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + AddressSanitizer +
# UndefinedBehaviorSanitizer (bazel --config=fuzz) and runs each for a bounded
# time: the graph text loader (seeded with the example graphs), the
# peer-written piece headers of the Messenger and rdma_copy, the sparse
# codecs' messages, region descriptors and proven records read back from the
# store, the ibverbs handshake and rdmacm private data, and the UCX worker
# address and remote key envelopes. Exits non-zero
# if a fuzzer finds a crash; the reproducer is left in $FUZZ_ARTIFACTS
# (default bazel-fuzz-artifacts/).
#
#   tools/fuzz.sh              # 30 s per target
#   FUZZ_SECONDS=600 tools/fuzz.sh
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
artifacts=${FUZZ_ARTIFACTS:-$PWD/bazel-fuzz-artifacts}
# A separate output base: the fuzz config uses another compiler, and sharing
# the main one would make each switch rebuild everything.
# One per checkout, like Bazel's own output bases.
output_base=${FUZZ_OUTPUT_BASE:-$HOME/.cache/rdmaflow-fuzz/$(pwd -P | md5sum | cut -c1-16)}

log=$(mktemp)
if ! bazel --output_base="$output_base" build --config=fuzz --symlink_prefix=/ \
  //graph_analyzer:graph_text_fuzzer //onesided:piece_stream_fuzzer \
  //compression:sparse_message_fuzzer //rdma:descriptor_fuzzer \
  //rdma/ibverbs:handshake_fuzzer //rdma/ucx:envelope_fuzzer >"$log" 2>&1; then
  grep -v "Cannot export local symbol" "$log" | tail -40
  echo "fuzz: building the fuzz targets FAILED"
  exit 1
fi
rm -f "$log"
bin=$(bazel --output_base="$output_base" info --config=fuzz bazel-bin)
mkdir -p "$artifacts"

# run_fuzzer NAME BINARY CORPUS [libFuzzer flags...]
run_fuzzer() {
  local name=$1 binary=$2 corpus=$3
  shift 3
  echo "fuzz: $name for ${seconds}s (corpus: $(ls "$corpus" | wc -l) seeds)"
  local output status=0
  output=$(mktemp)
  "$binary" "$corpus" "$@" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts/$name-" -print_final_stats=1 >"$output" 2>&1 || status=$?
  grep -E "^(#[0-9]+ +(INITED|DONE)|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==ERROR|SUMMARY|Done|artifact_prefix|Test unit written)" "$output" || true
  rm -f "$output"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $name FAILED (exit $status); reproducer in $artifacts"
    return "$status"
  fi
  echo "fuzz: $name passed"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/graphs" "$work/pieces" "$work/sparse" "$work/descriptors" "$work/handshakes" \
  "$work/envelopes"
cp graph_analyzer/testdata/*.pbtxt "$work/graphs/"
# Two at a time: a fuzzer is one process on one core, and this machine
# has two. Each one's lines come out once its pair is done.
names=()
pids=()
start() {
  local name=$1
  run_fuzzer "$@" >"$work/$name.log" 2>&1 &
  names+=("$name")
  pids+=($!)
}
finish() {
  local status=0 i
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=$?
    cat "$work/${names[$i]}.log"
  done
  names=()
  pids=()
  return "$status"
}
start graph_text_fuzzer "$bin/graph_analyzer/graph_text_fuzzer" "$work/graphs" \
  -dict=graph_analyzer/fuzz/graph_text.dict -max_len=65536
start piece_stream_fuzzer "$bin/onesided/piece_stream_fuzzer" "$work/pieces" -max_len=4096
finish || exit $?
start sparse_message_fuzzer "$bin/compression/sparse_message_fuzzer" "$work/sparse" \
  -max_len=4096
start descriptor_fuzzer "$bin/rdma/descriptor_fuzzer" "$work/descriptors" -max_len=4096
finish || exit $?
start handshake_fuzzer "$bin/rdma/ibverbs/handshake_fuzzer" "$work/handshakes" -max_len=2048
start envelope_fuzzer "$bin/rdma/ucx/envelope_fuzzer" "$work/envelopes" -max_len=2048
finish || exit $?
