#!/usr/bin/env bash
# Plots the RPC-vs-RDMA ablation (bench/ablation --tsv=PREFIX): step time per
# communicator per graph (PREFIX.graphs) and single-tensor bandwidth per
# communicator next to memcpy (PREFIX.sweep).
#   tools/plot_ablation.sh PREFIX out.png
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
prefix=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output "$png"
set multiplot layout 1,2
load "$(dirname "$0")/step_time_bars.gp"
set title "step time per graph (median of block means, slowest rank; lower is better)"
plot "$prefix.graphs" using 2:xtic(1) title columnheader(2), \
     "" using 3 title columnheader(3), "" using 4 title columnheader(4)
unset style
set style data linespoints
set title "one tensor per step: bandwidth (higher is better)"
set logscale x 2
set format x "%.0b%B"
set xtics norotate
set xlabel "tensor size (bytes)"
set ylabel "GB/s"
set key bottom right
plot "$prefix.sweep" using 1:3 title columnheader(3), \
     "" using 1:4 title columnheader(4), "" using 1:5 title columnheader(5), \
     "" using 1:2 with lines dashtype 2 title "memcpy, same run"
unset multiplot
GP
echo "plot: $png"
