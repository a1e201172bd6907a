#!/usr/bin/env bash
# Predicted samples per second (or another figure) against ranks, one line
# per strategy, from sim_extrapolation.py's TSV (first column ranks, then
# one per strategy).
#   tools/plot_sim_scale.sh in.tsv out.png "TITLE" ["Y LABEL" "lower|higher"]
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
tsv=$1
png=$2
title=${3:-}
ylabel=${4:-samples per second, whole job}
better=${5:-higher}
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
columns=$(head -1 "$tsv" | awk -F'\t' '{print NF}')
gnuplot <<GP
set terminal pngcairo size 760,480 font 'sans,10' noenhanced
set output '$png'
set title 'Simulated: $title ($better is better)'
set xlabel 'ranks (one a host)'
set ylabel '$ylabel'
set logscale xy 2
set format y '%.0s%c'
set grid
set key outside right
set datafile separator '\t'
set key autotitle columnhead
plot for [i=2:$columns] '$tsv' using 1:i with linespoints
GP
echo "plot: wrote $png"
