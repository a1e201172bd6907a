#!/usr/bin/env bash
# Jin et al.'s experiment ("How to scale distributed deep learning?", 2016:
# gossiping SGD is ahead of all-reduce SGD at small scale and behind it as
# the cluster grows, the two meeting around 32 nodes), here (docs/scale.md,
# "Gossip against all-reduce"):
#   1. measured: LeNet-5 on Fashion-MNIST with 2, 4 and 8 ranks over shared
#      memory, all-reduce and gossip (pull): steps and seconds to TARGET,
#      median of SEEDS (tools/measure_convergence.sh);
#   2. simulated: 8 to 128 ranks over 10 Gbit/s and HDR InfiniBand, step
#      time and time to TARGET with those steps (the most ranks measured
#      stand for larger jobs).
#   tools/paper_gossip_allreduce.sh [OUT_DIR]
#       (default bench-results/paper_gossip_allreduce; ~6 min)
# Environment: SEEDS ("1 2 3"), TARGET (0.80), STEPS (500), CONVERGENCE (a
# file tools/measure_convergence.sh wrote with allreduce and gossip at 2-8
# ranks, such as docs/scale/convergence.json: used instead of measuring).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,16p' "$0"
  exit 0
fi
out=${1:-bench-results/paper_gossip_allreduce}
mkdir -p "$out"
target=${TARGET:-0.80}
steps=${STEPS:-500}

convergence=${CONVERGENCE:-}
if [[ -z $convergence ]]; then
  echo "== 1. measured: steps and seconds to $target at 2, 4 and 8 ranks"
  convergence=$out/convergence.json
  SPECS='allreduce;gossip' RANKS="2 4 8" STEPS=$steps TARGET=$target \
    CONVERGENCE="$convergence" tools/measure_convergence.sh "$out/convergence"
else
  echo "== 1. measured: from $convergence"
  bazel build -c opt //cli:rdmaflow >/dev/null
fi

echo "== 2. simulated: 8-128 ranks"
bazel-bin/cli/rdmaflow simulate --model lenet5 --strategy 'allreduce;gossip' \
  --ranks 8,16,32,64,128 --link 10gbit,ib_hdr200 --cores 1 --steps 100 \
  --convergence "$convergence" --quiet --json "$out/simulated.json" |
  tee "$out/simulated.txt"
echo "paper_gossip_allreduce: results in $out"
