#!/usr/bin/env bash
# Plots test accuracy against training time per sync mode from
# tools/bench_ps.sh's per-step logs (OUT/sync_<mode>.rank1.csv).
#   tools/plot_ps_sync.sh OUT_DIR out.png
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
out=$1
png=$2
logs=()
for tag in bsp asp ssp_3 dssp_1_6; do logs+=("${tag//_/:}=$out/sync_$tag.rank1.csv"); done
exec "$(dirname "$0")/plot_accuracy.sh" "$png" \
  "LeNet-5 on Fashion-MNIST, 1 server + 2 workers, one worker 2x slower" "${logs[@]}"
