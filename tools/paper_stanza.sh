#!/usr/bin/env bash
# Stanza's experiment (Wu et al., "Stanza: Layer Separation for Distributed
# Training in Deep Learning": 1.34x-13.9x faster than a parameter server on
# EC2 V100 GPUs with 10 Gbit/s links), here (docs/scale.md, "Layer
# separation against the parameter server"):
#   1. measured: the VGG-like net on 4 ranks (1 server + 3 workers against
#      3 conv ranks + 1 FC rank, and all-reduce) over shared memory and
#      1 Gbit/s namespace links: step time (tools/bench_strategies.sh);
#   2. simulated: 8, 16 and 32 ranks over 10 Gbit/s, with hosts computing
#      1x, 10x and 50x as fast as this machine's core (an accelerator
#      shrinks compute, not bytes): step time of ps and layer_separated.
#   tools/paper_stanza.sh [OUT_DIR]   (default bench-results/paper_stanza;
#                                     ~6 min; needs root for the namespaces)
# Environment: LINKS ("shm 1gbit"), STEPS (8).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,14p' "$0"
  exit 0
fi
out=${1:-bench-results/paper_stanza}
mkdir -p "$out"

echo "== 1. measured: VGG on 4 ranks"
LINKS=${LINKS:-shm 1gbit} STEPS=${STEPS:-8} tools/bench_strategies.sh "$out/measured"

bazel build -c opt //cli:rdmaflow >/dev/null
for speedup in 1 10 50; do
  echo "== 2. simulated: 8-32 ranks over 10 Gbit/s, compute ${speedup}x"
  bazel-bin/cli/rdmaflow simulate --model vgg \
    --strategy 'ps:servers=1,sync=bsp;layer_separated:fc_ranks=1;layer_separated' \
    --ranks 8,16,32 --link 10gbit --cores 1 --compute_speedup "$speedup" --steps 20 \
    --quiet --json "$out/simulated_${speedup}x.json" | tee "$out/simulated_${speedup}x.txt"
done
echo "paper_stanza: results in $out"
