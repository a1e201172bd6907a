#!/usr/bin/env bash
# Predicted against measured step time, one point per run of
# tools/validate_sim.sh, by link, with the 15 % band (sim_validation.py's
# TSV).
#   tools/plot_sim_validation.sh validation.tsv out.png [TITLE]
# TITLE: the plot's title (default: validate_sim.sh's runs).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
tsv=$1
png=$2
title=${3:-Simulator vs runs: step time (2, 4, 8 processes, every strategy)}
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
gnuplot <<GP
set terminal pngcairo size 640,560 font 'sans,10'
set output '$png'
set title '${title//\'/}'
set xlabel 'measured ms per step'
set ylabel 'predicted ms per step'
set logscale xy
set grid
set key top left
set datafile separator '\t'
f(x) = x
plot f(x) with lines lc 'black' title 'exact', \
     1.15 * x with lines dt 2 lc 'gray' title '+-15 %', \
     0.85 * x with lines dt 2 lc 'gray' notitle, \
     '$tsv' using (strcol(1) eq 'shm' ? \$4 : 1/0):5 with points pt 7 title 'shared memory', \
     '' using (strcol(1) eq '1gbit' ? \$4 : 1/0):5 with points pt 5 title '1 Gbit/s', \
     '' using (strcol(1) eq '100mbit' ? \$4 : 1/0):5 with points pt 9 title '100 Mbit/s'
GP
echo "plot: wrote $png"
