#!/usr/bin/env bash
# Plots the step timelines rdmaflow_train writes with --log_prefix PREFIX
# (PREFIX.rank<R>.timeline.json, Chrome traces: train/timeline_trace.h)
# as one PNG: a band per rank, in it a row each for compute, communication
# and waiting, over the steps asked for (time in ms from the first one).
# Communication hidden behind compute shows as boxes of the compute and
# communication rows side by side. Writes the boxes it plots next to the
# PNG (out.tsv).
#   tools/plot_timeline.sh out.png PREFIX [FIRST_STEP [LAST_STEP]]
# LAST_STEP defaults to FIRST_STEP + 4.
# The window is steps FIRST to LAST (default 5 to 9, past the warm-up) of
# the ranks with the fewest steps (workers: a ps server counts a step per
# gradient); every rank's spans inside it are drawn.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 4 ]; then
  echo "usage: $0 out.png PREFIX [FIRST_STEP [LAST_STEP]] (--help for more)" >&2
  exit 2
fi
png=$1
tsv=${png%.png}.tsv
first=${3:-5}
last=${4:-$((first + 4))}
if ! [[ $first =~ ^[0-9]+$ && $last =~ ^[0-9]+$ ]] || [ "$first" -gt "$last" ]; then
  echo "plot_timeline: steps must be whole numbers with FIRST_STEP <= LAST_STEP" >&2
  exit 2
fi
ytics_file=$(mktemp)
trap 'rm -f "$ytics_file"' EXIT
/usr/bin/python3 - "$2" "$first" "$last" "$tsv" "$ytics_file" <<'PY'
import glob, json, re, sys
prefix, first, last, out, ytics = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                   sys.argv[4], sys.argv[5])
kinds = ["compute", "communication", "wait"]
paths = sorted(glob.glob(prefix + ".rank*.timeline.json"),
               key=lambda p: int(re.search(r"\.rank(\d+)\.timeline\.json$", p).group(1)))
if not paths:
    sys.exit(f"plot_timeline: no {prefix}.rank*.timeline.json")
# The window: steps FIRST..LAST of the ranks with the fewest steps (the
# workers: a ps server counts a step per gradient); every rank's spans in
# it are drawn, cut at its edges.
traces = []
for path in paths:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    traces.append((path, events, spans, max((e["args"]["step"] for e in spans), default=None)))
counted = [steps for _, _, _, steps in traces if steps is not None]
if not counted:
    sys.exit(f"plot_timeline: no spans in {prefix}.rank*.timeline.json")
fewest = min(counted)
window = [e for _, _, x, steps in traces if steps == fewest for e in x
          if first <= e["args"]["step"] <= last]
if not window:
    sys.exit(f"plot_timeline: no spans of steps {first} to {last}")
lo = min(e["ts"] for e in window)
hi = max(e["ts"] + e["dur"] for e in window)
boxes, labels = [], []
for band, (path, events, spans, _) in enumerate(traces):
    name = next((e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"), path)
    for row, kind in enumerate(kinds):
        y = band * 4 + (2 - row)
        labels.append((y, f"{name}: {kind}"))
        for e in spans:
            begin, end = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
            if e.get("cat") == kind and end > begin:
                boxes.append((y, begin, end, kind))
if not boxes:
    sys.exit(f"plot_timeline: no spans of steps {first} to {last}")
t0 = lo
with open(out, "w") as f:
    f.write("row\tbegin_ms\tend_ms\tkind\n")
    for y, begin, end, kind in boxes:
        f.write(f"{y}\t{(begin - t0) / 1000:.4f}\t{(end - t0) / 1000:.4f}\t{kinds.index(kind)}\n")
with open(ytics, "w") as f:
    f.write(", ".join(f'"{label}" {y}' for y, label in labels))
print(f"plot_timeline: {len(boxes)} spans of {len(paths)} ranks, steps {first} to {last}")
PY
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not installed (tools/setup.sh installs gnuplot-nox); skipping" >&2
  exit 0
fi
ytics=$(cat "$ytics_file")
gnuplot <<GP
set terminal pngcairo size 1100,500 noenhanced
set output "$png"
set datafile separator "\t"
set title "step timeline per rank (compute, communication, waiting)"
set xlabel "ms"
set ytics ($ytics)
set yrange [-1:*]
set grid xtics
set style fill solid 0.8 noborder
set palette defined (0 "#3b82c4", 1 "#e69f00", 2 "#c0392b")
set cbrange [0:2]
unset colorbox
plot "$tsv" skip 1 using ((\$2+\$3)/2):1:((\$3-\$2)/2):(0.4):4 with boxxyerror palette notitle
GP
echo "plot: $png"
