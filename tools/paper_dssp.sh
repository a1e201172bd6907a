#!/usr/bin/env bash
# The DSSP paper's experiment (Zhao et al., ICDCS 2019: Dynamic SSP reaches
# a target accuracy sooner than SSP and BSP in a cluster with stragglers),
# here (docs/scale.md, "DSSP with a straggler"):
#   1. measured: 1 server + 2 workers, worker 1 (rank 2) slowed 2x, LeNet-5
#      on Fashion-MNIST, bsp / asp / ssp:3 / dssp:1:6: time to TARGET
#      (tools/bench_ps.sh's sync part);
#   2. convergence with that straggler: steps to TARGET per mode, median of
#      SEEDS (tools/measure_convergence.sh with the straggler);
#   3. simulated at cluster sizes: 1 server + 8 and 16 workers, one 2x
#      straggler, over 10 Gbit/s, with those steps: time to TARGET.
#   tools/paper_dssp.sh [OUT_DIR]   (default bench-results/paper_dssp; ~8 min)
# Environment: SEEDS ("1 2 3"), TARGET (0.80), STEPS (600).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,13p' "$0"
  exit 0
fi
out=${1:-bench-results/paper_dssp}
mkdir -p "$out"
target=${TARGET:-0.80}
steps=${STEPS:-600}
modes='ps:servers=1,sync=bsp;ps:servers=1,sync=asp;ps:servers=1,sync=ssp:3;ps:servers=1,sync=dssp:1:6'

echo "== 1. measured: time to $target, 3 ranks, rank 2 slowed 2x"
PARTS=sync SYNC_STEPS=$steps TARGET=$target tools/bench_ps.sh "$out/measured"

echo "== 2. steps to $target with the straggler"
SPECS=$modes RANKS=3 STEPS=$steps TARGET=$target EXTRA="--slow_rank 2 --slow_factor 2" \
  CONVERGENCE="$out/convergence.json" tools/measure_convergence.sh "$out/convergence"

echo "== 3. simulated: 9 and 17 ranks over 10 Gbit/s, rank 2 slowed 2x"
bazel-bin/cli/rdmaflow simulate --model lenet5 --strategy "$modes" --ranks 3,9,17 \
  --link 10gbit --cores 1 --steps 200 --slow_rank 2 --slow_factor 2 \
  --convergence "$out/convergence.json" --quiet --json "$out/simulated.json" |
  tee "$out/simulated.txt"
echo "paper_dssp: results in $out"
