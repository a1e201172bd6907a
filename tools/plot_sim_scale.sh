#!/usr/bin/env bash
# Predicted samples per second against ranks, one line per strategy, from
# sim_extrapolation.py's TSV (first column ranks, then one per strategy).
#   tools/plot_sim_scale.sh in.tsv out.png "TITLE"
set -euo pipefail
tsv=$1
png=$2
title=${3:-}
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
columns=$(head -1 "$tsv" | awk -F'\t' '{print NF}')
gnuplot <<GP
set terminal pngcairo size 760,480 font 'sans,10' noenhanced
set output '$png'
set title 'Simulated: $title (higher is better)'
set xlabel 'ranks (one a host)'
set ylabel 'samples per second, whole job'
set logscale xy 2
set format y '%.0s%c'
set grid
set key outside right
set datafile separator '\t'
set key autotitle columnhead
plot for [i=2:$columns] '$tsv' using 1:i with linespoints
GP
echo "plot: wrote $png"
