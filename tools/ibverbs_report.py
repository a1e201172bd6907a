#!/usr/bin/python3
"""Puts rdmaflow's ping-pong over ibverbs next to perftest's tools from the
same VM run of tools/bench_ibverbs_vm.sh: one row per perftest test, the
perftest figure, rdmaflow's figure for each notification path (write with
immediate, flag records), their ratio, and the issue's target for it. Where
the run repeated everything, each figure is the median over the repeats
(and the ratio is of medians).
Latency is perftest's t_typical (the median; one-way for writes) against
rdmaflow's lat_p50_us measured the same way; bandwidth is perftest's BW
average in its MB/sec (2^20 bytes/s) against rdmaflow's bw_avg in the same
unit. Writes DIR/ibverbs_vs_perftest.{txt,json,tsv} and, with gnuplot,
the PNG named by --png.

  tools/ibverbs_report.py DIR [--png docs/img/ibverbs_vs_perftest.png]

DIR holds pingpong_ibverbs_<notify>[_r<N>].json (transport_pingpong
--json) and perftest_<tool>_<bytes>[_r<N>].txt (the tool's client output).
"""

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

# (perftest tool, bytes, rdmaflow op, what is compared, target ratio:
#  ("<=", x) for latency, (">=", x) for bandwidth)
TESTS = [
    ("ib_write_lat", 8, "write", "lat", ("<=", 1.5)),
    ("ib_write_lat", 4096, "write", "lat", ("<=", 1.2)),
    ("ib_write_lat", 65536, "write", "lat", None),
    ("ib_read_lat", 8, "read", "lat", ("<=", 1.2)),
    ("ib_read_lat", 4096, "read", "lat", None),
    ("ib_write_bw", 65536, "write", "bw", (">=", 0.95)),
    ("ib_write_bw", 1048576, "write", "bw", (">=", 0.95)),
    ("ib_read_bw", 65536, "read", "bw", None),
    ("ib_read_bw", 1048576, "read", "bw", None),
]
NOTIFY = ["imm", "flag"]
MIB = 1024.0 * 1024.0


def perftest_figure(path, kind):
    """t_typical (lat) or BW average (bw) from a perftest client output."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 5 or not re.fullmatch(r"\d+", fields[0]):
                continue
            if not re.fullmatch(r"\d+", fields[1]):
                continue
            try:
                return float(fields[4] if kind == "lat" else fields[3])
            except ValueError:
                return None
    return None


def rdmaflow_figure(rows, op, size, kind):
    for row in rows:
        if row.get("op") == op and int(row.get("bytes", 0)) == size:
            if kind == "lat":
                return row.get("latP50Us", row.get("lat_p50_us"))
            mbps = row.get("bwAvgMbps", row.get("bw_avg_mbps"))
            return None if mbps is None else mbps * 1e6 / MIB
    return None


def load_rows(path):
    with open(path) as f:
        report = json.load(f)
    return report.get("pingpong", {}).get("rows", [])


def repeats(directory, stem, ext):
    """The files of `stem` (one run, or _r1, _r2, ... for repeats)."""
    return sorted(glob.glob(os.path.join(directory, f"{stem}.{ext}")) +
                  glob.glob(os.path.join(directory, f"{stem}_r*.{ext}")))


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def meets(ratio, target):
    if ratio is None or target is None:
        return ""
    op, bound = target
    ok = ratio <= bound if op == "<=" else ratio >= bound
    return "yes" if ok else "NO"


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--png", default="")
    args = parser.parse_args()
    runs = {n: [load_rows(p) for p in
                repeats(args.dir, f"pingpong_ibverbs_{n}", "json")]
            for n in NOTIFY}
    if not any(runs.values()):
        sys.exit(f"no pingpong_ibverbs_*.json in {args.dir}")
    results = []
    for tool, size, op, kind, target in TESTS:
        theirs_all = [perftest_figure(p, kind) for p in
                      repeats(args.dir, f"perftest_{tool}_{size}", "txt")]
        theirs = median(theirs_all)
        entry = {"perftest": tool, "bytes": size, "kind": kind,
                 "unit": "us" if kind == "lat" else "MB/s (2^20)",
                 "perftest_value": theirs, "perftest_runs": theirs_all,
                 "target": None if target is None else f"{target[0]} {target[1]}"}
        for n in NOTIFY:
            ours_all = [rdmaflow_figure(rows, op, size, kind)
                        for rows in runs[n]]
            ours = median(ours_all)
            entry[f"rdmaflow_{n}_runs"] = ours_all
            ratio = ours / theirs if ours and theirs else None
            entry[f"rdmaflow_{n}"] = ours
            entry[f"ratio_{n}"] = ratio
            entry[f"meets_{n}"] = meets(ratio, target)
        results.append(entry)

    header = (f"{'perftest test':<22} {'unit':>6} {'perftest':>9} "
              f"{'rdmaflow imm':>13} {'ratio':>6} {'ok':>3} "
              f"{'rdmaflow flag':>14} {'ratio':>6} {'ok':>3}  target")
    lines = [header, "-" * len(header)]
    for e in results:
        lines.append(
            f"{e['perftest'] + ' -s ' + str(e['bytes']):<22} "
            f"{'us' if e['kind'] == 'lat' else 'MB/s':>6} "
            f"{fmt(e['perftest_value']):>9} {fmt(e['rdmaflow_imm']):>13} "
            f"{fmt(e['ratio_imm']):>6} {e['meets_imm']:>3} "
            f"{fmt(e['rdmaflow_flag']):>14} {fmt(e['ratio_flag']):>6} "
            f"{e['meets_flag']:>3}  {e['target'] or ''}")
    lines.append("")
    lines.append(f"{max(len(r) for r in runs.values())} run(s) of each; "
                 "figures are medians over the runs.")
    lines.append("ratio: rdmaflow / perftest (latency: lower is better; "
                 "bandwidth: higher is better). Latency is the median, "
                 "one-way for writes (rdmaflow: a write with notification, "
                 "perftest: a write whose last byte the target polls).")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.dir, "ibverbs_vs_perftest.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.dir, "ibverbs_vs_perftest.json"), "w") as f:
        json.dump(results, f, indent=1)
    tsv = os.path.join(args.dir, "ibverbs_vs_perftest.tsv")
    with open(tsv, "w") as f:
        for e in results:
            label = f"{e['perftest'].replace('ib_', '')} {e['bytes']}"
            f.write(f"{label}\t{e['ratio_imm'] or 0}\t{e['ratio_flag'] or 0}\n")
    if args.png:
        plot(tsv, args.png)


def plot(tsv, png):
    if shutil.which("gnuplot") is None:
        print("plot: gnuplot not installed (tools/setup.sh installs "
              "gnuplot-nox); skipping", file=sys.stderr)
        return
    script = f"""
set terminal pngcairo size 1000,560 noenhanced
set output "{png}"
set title "rdmaflow over ibverbs / perftest, same Soft-RoCE VM run\\n(latency: lower is better; bandwidth: higher is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set datafile separator "\\t"
set ylabel "ratio to perftest"
set xtics rotate by -30
set yrange [0:*]
set grid ytics
set key top right
plot "{tsv}" using 2:xtic(1) title "notify=imm (write with immediate)", \\
     "" using 3 title "notify=flag (record in the peer's ring)", \\
     1 with lines dashtype 2 lc rgb "black" title "parity"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
