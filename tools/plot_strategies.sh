#!/usr/bin/env bash
# Bar chart of step time per strategy and link, from strategies_report.py's
# TSV.
#   tools/plot_strategies.sh strategies.tsv out.png
set -euo pipefail
tsv=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
gnuplot <<GP
set terminal pngcairo size 760,440 font 'sans,10'
set output '$png'
set title 'VGG-like net, 4 ranks: step time (lower is better)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set ylabel 'ms per step'
set logscale y
set grid ytics
set key top left
plot '$tsv' using 2:xtic(1) title 'parameter server (1+3)', \
     '' using 3 title 'all-reduce (4 replicas)', \
     '' using 4 title 'layer separated (3 conv + 1 FC)', \
     '' using 5 title 'layer separated (K by cost model)'
GP
echo "plot: wrote $png"
