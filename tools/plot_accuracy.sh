#!/usr/bin/env bash
# Plots test accuracy against training time from rdmaflow_train's per-step
# metrics logs (--log_prefix ... --eval_every N: the rows with a
# test_accuracy), one line per log.
#   tools/plot_accuracy.sh out.png "title" LABEL=path/to/log.rank0.csv ...
# Logs that do not exist are left out; without gnuplot it says so and exits 0.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
png=$1
title=$2
shift 2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
plots=()
for spec in "$@"; do
  label=${spec%%=*}
  csv=${spec#*=}
  [[ -f $csv ]] || continue
  curve="${csv%.csv}.curve"
  # Columns by name: elapsed_s and test_accuracy.
  awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) col[$i] = i; next}
           $col["test_accuracy"] != "" {print $col["elapsed_s"], $col["test_accuracy"]}' \
    "$csv" >"$curve"
  plots+=("\"$curve\" using 1:2 with linespoints title \"$label\"")
done
if [[ ${#plots[@]} -eq 0 ]]; then
  echo "plot: no logs for $png" >&2
  exit 0
fi
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 900,550 noenhanced
set output "$png"
set title "$title"
set xlabel "training time of the evaluating rank (s, evaluations excluded)"
set ylabel "test accuracy"
set grid
set key bottom right
set yrange [0:1]
plot $joined
GP
