#!/usr/bin/env bash
# Plots the planner's scaling from graph_planner_benchmark JSON output:
# planning time and registered bytes vs graph size, slot sharing on and off.
#   bazel run -c opt //bench:graph_planner_benchmark -- \
#       --benchmark_out=planner.json --benchmark_out_format=json
#   tools/plot_planner.sh planner.json out.png
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
json=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
tsv=$(mktemp)
trap 'rm -f "$tsv"' EXIT
# nodes, share, ms, registered MiB for each BM_PlanRandom run.
python3 - "$json" >"$tsv" <<'PY'
import json, re, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    m = re.match(r"BM_PlanRandom/nodes:(\d+)/share:(\d)$", b["name"])
    if m:
        print(m.group(1), m.group(2), b["real_time"], b["registered_MiB"], sep="\t")
PY
gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output "$png"
set title "rdmaflow plan: planning time and registered memory vs graph size (8 ranks)"
set xlabel "nodes in the graph"
set ylabel "planning time (ms)"
set y2label "registered memory, all ranks (MiB)"
set y2tics
set ytics nomirror
set key left top
set grid
set datafile separator "\t"
plot "< awk '\$2==1' $tsv" using 1:3 with linespoints title "time, slot sharing on", \
     "< awk '\$2==0' $tsv" using 1:3 with linespoints title "time, sharing off", \
     "< awk '\$2==1' $tsv" using 1:4 axes x1y2 with linespoints dashtype 2 title "registered, sharing on", \
     "< awk '\$2==0' $tsv" using 1:4 axes x1y2 with linespoints dashtype 2 title "registered, sharing off"
GP
echo "plot: $png"
