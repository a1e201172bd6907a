#!/usr/bin/env bash
# Bar chart of step time per strategy and link, from strategies_report.py's
# TSV (columns a run left out, all nan, are left out of the chart).
#   tools/plot_strategies.sh strategies.tsv out.png
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
tsv=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
declare -A titles=(
  [ps]='parameter server (1+3)'
  [allreduce]='all-reduce (4 replicas, overlap=on)'
  [allreduce_no_overlap]='all-reduce after backward (overlap=off)'
  [layer_separated]='layer separated (3 conv + 1 FC)'
  [layer_separated_auto]='layer separated (K by cost model)'
  [gossip]='gossip (mix after the step)'
  [gossip_overlap]='gossip (read during compute, overlap=on)'
  [moshpit]='Moshpit (average after the step)'
  [moshpit_overlap]='Moshpit (average during compute, overlap=on)'
)
# The columns with at least one measured value.
read -r -a columns <<<"$(awk -F'\t' 'NR == 1 { n = NF; next }
  { for (i = 2; i <= NF; i++) if ($i != "nan") seen[i] = 1 }
  END { for (i = 2; i <= n; i++) if (seen[i]) printf "%d ", i }' "$tsv")"
if [[ ${#columns[@]} -eq 0 ]]; then
  echo "plot: no step times in $tsv; skipping" >&2
  exit 0
fi
plot=
for c in "${columns[@]}"; do
  name=$(head -1 "$tsv" | cut -f "$c")
  title=${titles[$name]:-${name//_/ }}  # gnuplot takes _ for a subscript
  if [[ -z $plot ]]; then
    plot="'$tsv' using $c:xtic(1) title '$title'"
  else
    plot="$plot, '' using $c title '$title'"
  fi
done
gnuplot <<GP
set terminal pngcairo size 900,440 font 'sans,10'
set output '$png'
set title 'VGG-like net, 4 ranks: step time (lower is better)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set ylabel 'ms per step'
set logscale y
set grid ytics
set key outside right top
set datafile missing 'nan'
plot $plot
GP
echo "plot: wrote $png"
