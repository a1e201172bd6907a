#!/usr/bin/env bash
# The Moshpit paper's experiment (Ryabinin et al., NeurIPS 2021: Moshpit SGD
# trains ResNet-50 on ImageNet 1.3x faster than gossip, and 1.5x faster on
# preemptible nodes), here (docs/scale.md, "Moshpit against gossip"):
#   1. measured: 4 ranks, LeNet-5 on Fashion-MNIST, all-reduce, gossip and
#      Moshpit, every rank up and rank 3 killed half-way (the preemption):
#      time to TARGET (tools/bench_decentralized.sh);
#   2. simulated at the sizes such clusters have: 16, 64 and 256 ranks over
#      1 and 10 Gbit/s, every rank up and one gone at step 50: step time and
#      time to TARGET from docs/scale/convergence.json (Moshpit's and
#      gossip's steps as measured at the most ranks run here).
#   tools/paper_moshpit.sh [OUT_DIR]   (default bench-results/paper_moshpit; ~4 min)
# Environment: TARGET (0.80; the simulated part takes the convergence
# file's), STEPS (400), CONVERGENCE (docs/scale/convergence.json).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,14p' "$0"
  exit 0
fi
out=${1:-bench-results/paper_moshpit}
mkdir -p "$out"
target=${TARGET:-0.80}
steps=${STEPS:-400}
convergence=${CONVERGENCE:-docs/scale/convergence.json}

echo "== 1. measured: 4 ranks, homogeneous and rank 3 killed at step $((steps / 2))"
SCENARIOS="homogeneous kill" STRATEGIES="allreduce gossip moshpit" STEPS=$steps \
  TARGET=$target tools/bench_decentralized.sh "$out/measured"

bazel build -c opt //cli:rdmaflow >/dev/null
for kill in none 1; do
  churn=()
  [[ $kill != none ]] && churn=(--kill_rank "$kill" --kill_step 50)
  echo "== 2. simulated: 16-256 ranks over 1 and 10 Gbit/s, killed rank: $kill"
  bazel-bin/cli/rdmaflow simulate --model lenet5 --strategy 'gossip;moshpit' \
    --ranks 16,64,256 --link 1gbit,10gbit --cores 1 --steps 100 "${churn[@]}" \
    --convergence "$convergence" --quiet --json "$out/simulated_kill_$kill.json" |
    tee "$out/simulated_kill_$kill.txt"
done
echo "paper_moshpit: results in $out"
