#!/usr/bin/env bash
# Plots two builds' ablation runs side by side (bench/ablation --tsv=PREFIX,
# the builds run alternately in one session): the step time of each graph
# per communicator (the median of block means; the p50 in TSVs written
# before 2026-12-02), before and after, averaged over the runs given, and
# writes the table it plots next to the PNG (out.tsv).
#   tools/plot_ablation_ab.sh out.png BEFORE_PREFIX[,BEFORE_PREFIX2...] AFTER_PREFIX[,...]
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 out.png BEFORE_PREFIXES AFTER_PREFIXES (--help for more)" >&2
  exit 2
fi
png=$1
tsv=${png%.png}.tsv
/usr/bin/python3 - "$2" "$3" "$tsv" <<'PY'
import csv, sys
def mean_of(prefixes):
    sums, counts, order, comms = {}, {}, [], None
    for prefix in prefixes.split(","):
        with open(prefix + ".graphs") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        comms = rows[0][1:]
        for row in rows[1:]:
            if row[0] not in order: order.append(row[0])
            for comm, value in zip(comms, row[1:]):
                key = (row[0], comm)
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}, order, comms
before, order, comms = mean_of(sys.argv[1])
after, _, _ = mean_of(sys.argv[2])
with open(sys.argv[3], "w") as out:
    out.write("graph\t" + "\t".join(f"{c} before\t{c} after" for c in comms) + "\n")
    for graph in order:
        out.write(graph + "\t" + "\t".join(
            f"{before[(graph, c)]:.4g}\t{after[(graph, c)]:.4g}" for c in comms) + "\n")
PY
cat "$tsv"
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
columns=$(head -1 "$tsv" | awk -F'\t' '{print NF}')
gnuplot <<GP
set terminal pngcairo size 1000,500 noenhanced
set output "$png"
load "$(dirname "$0")/step_time_bars.gp"
set title "ablation step time per graph, before and after (median of block means; lower is better)"
plot for [i=2:$columns] "$tsv" using i:xtic(1) title columnheader(i)
GP
echo "plot: $png"
