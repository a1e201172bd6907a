#!/usr/bin/env bash
# Plots a transport_pingpong TSV (bandwidth of writes and reads vs memcpy).
#   tools/plot_pingpong.sh results.tsv out.png
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
tsv=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output "$png"
set title "rdmaflow ping-pong: bandwidth vs message size (single-thread memcpy as the limit)"
set logscale x 2
set format x "%.0b%B"
set logscale y 10
set xlabel "message size (bytes)"
set ylabel "MB/s"
set key right bottom
set grid
set datafile separator "\t"
plot "< grep '^write' $tsv" using 2:3 with linespoints title "one-sided write (+notification)", \
     "< grep '^read' $tsv" using 2:3 with linespoints title "one-sided read", \
     "< grep '^write' $tsv" using 2:4 with lines dashtype 2 title "memcpy, same run"
GP
echo "plot: $png"
