#!/usr/bin/env bash
# Plots all-reduce bus bandwidth against size, one panel per rank count, from
# a TSV of columns ranks, bytes, then one GB/s column per series (one header
# row), as tools/allreduce_report.py and tools/torch_report.py write them.
# PANEL_UNIT names what the first column counts (default "ranks").
#   tools/plot_allreduce.sh allreduce.tsv out.png [TITLE ...]
# The titles name the series in order (default: rdmaflow, its ring alone,
# Gloo, Open MPI).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
tsv=$1
png=$2
shift 2
titles=("$@")
if [ ${#titles[@]} -eq 0 ]; then
  titles=("rdmaflow (UCX shm, picked per size)" "rdmaflow ring only" "Gloo (c10d, TCP)" "Open MPI")
fi
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
ranks=$(awk 'NR > 1 {print $1}' "$tsv" | sort -un | tr '\n' ' ')
count=$(echo $ranks | wc -w)
for n in $ranks; do
  awk -v n="$n" 'NR > 1 && $1 == n' "$tsv" >"$tsv.$n"
done
{
  echo "set terminal pngcairo size $((520 * count)),420 font 'sans,10'"
  echo "set output '$png'"
  echo "set multiplot layout 1,$count title '${PLOT_TITLE:-All-reduce bus bandwidth (float32 sum)}'"
  echo "set logscale x 2; set logscale y 10; set grid"
  echo "set xlabel 'bytes'; set ylabel 'bus bandwidth (GB/s)'; set key top left"
  echo "set format x '%.0s%cB'"
  for n in $ranks; do
    echo "set title '$n ${PANEL_UNIT:-ranks}'"
    plot="plot"
    for i in "${!titles[@]}"; do
      [ "$i" -gt 0 ] && plot="$plot,"
      plot="$plot '$tsv.$n' using 2:$((i + 3)) with linespoints lw 2 title '${titles[$i]}'"
    done
    echo "$plot"
  done
  echo "unset multiplot"
} | gnuplot
echo "plot: wrote $png"
