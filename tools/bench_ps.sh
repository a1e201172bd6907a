#!/usr/bin/env bash
# Parameter server benchmarks (docs/strategies.md), each a local job of
# 1 server + 2 workers over UCX shared memory:
#   sync: LeNet-5 on Fashion-MNIST with worker 1 (rank 2) slowed 2x, for
#         bsp, asp, ssp:3 and dssp:1:6: test accuracy against training time
#         (worker 0 evaluates 2000 test images every 25 steps), the time to
#         reach a target accuracy, and a PNG;
#   comm: the VGG-like net's step time (compute included) over the rdma
#         communicator (one-sided READ pulls), rdma with pull=send, rdma_copy
#         and grpc, in the same run.
#   tools/bench_ps.sh [OUT_DIR]   (default bench-results/ps; ~4 min)
# Environment: PARTS ("sync comm"), SYNC_STEPS (600), COMM_STEPS (30),
# TARGET (0.80).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/ps}
mkdir -p "$out"
sync_steps=${SYNC_STEPS:-600}
comm_steps=${COMM_STEPS:-30}
target=${TARGET:-0.80}
parts=${PARTS:-sync comm}
bazel build -c opt //train:rdmaflow_train >/dev/null
train=bazel-bin/train/rdmaflow_train

[[ $parts == *sync* ]] && for mode in bsp asp ssp:3 dssp:1:6; do
  tag=${mode//:/_}
  echo "== sync $mode: $sync_steps steps, rank 2 slowed 2x"
  "$train" --local 3 --model lenet5 --sync "$mode" --steps "$sync_steps" \
    --slow_rank 2 --slow_factor 2 --eval_every 25 --eval_samples 2000 \
    --log_prefix "$out/sync_$tag" --json "$out/sync_$tag.json" \
    --progress=false 2>&1 | grep -v '^{' || true
done

[[ $parts == *comm* ]] && for variant in rdma:read rdma:send rdma_copy:send grpc:send; do
  comm=${variant%%:*}
  pull=${variant##*:}
  echo "== comm $comm (pull=$pull): vgg, $comm_steps steps"
  "$train" --local 3 --model vgg --sync bsp --steps "$comm_steps" \
    --communicator "$comm" --strategy_params "pull=$pull" \
    --json "$out/comm_${comm}_$pull.json" --progress=false 2>&1 | grep -v '^{' || true
done

python3 tools/ps_report.py "$out" "$target" | tee "$out/report.txt"
[[ $parts == *sync* ]] && tools/plot_ps_sync.sh "$out" "$out/ps_sync.png"
echo "bench_ps: results in $out"
