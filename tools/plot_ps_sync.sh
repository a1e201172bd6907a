#!/usr/bin/env bash
# Plots test accuracy against training time per sync mode from
# tools/bench_ps.sh's per-step logs (OUT/sync_<mode>.rank1.csv).
#   tools/plot_ps_sync.sh OUT_DIR out.png
set -euo pipefail
out=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
plots=()
for tag in bsp asp ssp_3 dssp_1_6; do
  csv="$out/sync_$tag.rank1.csv"
  [[ -f $csv ]] || continue
  # Only the rows with an evaluation: elapsed_s, test_accuracy.
  awk -F, 'NR > 1 && $10 != "" {print $2, $10}' "$csv" >"$out/sync_$tag.curve"
  plots+=("\"$out/sync_$tag.curve\" using 1:2 with linespoints title \"${tag//_/:}\"")
done
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 900,550 noenhanced
set output "$png"
set title "LeNet-5 on Fashion-MNIST, 1 server + 2 workers, one worker 2x slower"
set xlabel "training time of worker 0 (s)"
set ylabel "test accuracy (2000 images)"
set grid
set key bottom right
set yrange [0:1]
plot $joined
GP
