#!/usr/bin/env bash
# The main job: set up, build optimized, and run the write/read ping-pong
# between two processes over UCX shared memory, next to memcpy measured in the
# same run. Prints the table; JSON, TSV and a plot go to $OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

OUT_DIR=${OUT_DIR:-bench-results}
mkdir -p "$OUT_DIR"
bazel build -c opt //bench:transport_pingpong
bazel-bin/bench/transport_pingpong --transport=ucx --params=tls=shm \
  --json="$OUT_DIR/pingpong_ucx_shm.json" --tsv="$OUT_DIR/pingpong_ucx_shm.tsv" "$@"
tools/plot_pingpong.sh "$OUT_DIR/pingpong_ucx_shm.tsv" "$OUT_DIR/pingpong_ucx_shm.png"
echo "results: $OUT_DIR/pingpong_ucx_shm.{json,tsv,png}"
