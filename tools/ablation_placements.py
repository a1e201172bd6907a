#!/usr/bin/env python3
"""Zero copy against rdma_copy over several ablation runs, placement marked.

Usage: ablation_placements.py RUN.json [RUN.json ...]

Reads `bench/ablation --json` reports of runs made with
--communicators=rdma,rdma_copy,rdma_copy+streaming_copy_kb=0,rdma+streaming_copy_kb=0
and prints, per graph and sweep size, a Markdown table: each communicator's
median of block means (ms) in every run, marked with a superscript f where a
placement probe before or after that run found the CPUs far apart (a
cache-line round trip over 200 ns: docs/benchmarks.md, "The machine's two
placements"), "?" where a probe is missing; then, per run, rdma_copy at its
better setting over zero copy at its default, and the same with only the
rdma_copy runs made in zero copy's placement ("-": none was). Ratios under issue 47's targets (1.5x a graph, 1x
a sweep size) are in bold. docs/ablation.md's tables come from it.
"""
import argparse
import json

COMMUNICATORS = ["rdma", "rdma+streaming_copy_kb=0", "rdma_copy",
                 "rdma_copy+streaming_copy_kb=0"]
FAR_NS = 200


def far(run):
    """True or False where both probes were taken, None where one was not
    (runs before the probes, or a probe that failed)."""
    before = run.get("line_round_trip_ns_before", 0)
    after = run.get("line_round_trip_ns_after", 0)
    if before <= 0 or after <= 0:
        return None
    return max(before, after) > FAR_NS


def mom(run):
    if "step_block_median_ms" not in run:
        raise SystemExit("ablation_placements: a run without a median of block means "
                         "(a report of an older build)")
    return run["step_block_median_ms"]


def rows(report):
    out = [(g["graph"], g["runs"]) for g in report.get("graphs", [])]
    out += [(f"one tensor, {s['bytes'] >> 10} KiB", s["runs"]) for s in report.get("sweep", [])]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="ablation --json reports, one per run")
    args = parser.parse_args()
    reports = []
    for path in args.runs:
        with open(path) as f:
            reports.append(json.load(f)["ablation"])
    names = [name for name, _ in rows(reports[0])]
    print("| | " + " | ".join(COMMUNICATORS) +
          " | better rdma_copy / zero copy | the same, one placement |")
    print("|---" * (len(COMMUNICATORS) + 3) + "|")
    for name in names:
        cells = {c: [] for c in COMMUNICATORS}
        ratios, same = [], []
        for report in reports:
            by_name = dict(rows(report))
            if name not in by_name:
                raise SystemExit(f"ablation_placements: {name} is missing from a run")
            runs = {r["communicator"]: r for r in by_name[name]}
            missing = [c for c in COMMUNICATORS if c not in runs]
            if missing:
                raise SystemExit(f"ablation_placements: {name}: no run of {', '.join(missing)}")
            for c in COMMUNICATORS:
                mark = {True: "ᶠ", False: "", None: "?"}[far(runs[c])]
                cells[c].append(f"{mom(runs[c]):.3g}" + mark)
            zero = runs["rdma"]
            copies = [runs["rdma_copy"], runs["rdma_copy+streaming_copy_kb=0"]]
            ratios.append(min(mom(c) for c in copies) / mom(zero))
            placed = [c for c in copies
                      if far(zero) is not None and far(c) == far(zero)]
            same.append(min(mom(c) for c in placed) / mom(zero) if placed else None)
        bar = 1.0 if name.startswith("one tensor") else 1.5

        def show(x):
            if x is None:
                return "-"
            return f"**{x:.2f}x**" if x < bar else f"{x:.2f}x"

        print(f"| {name} | " + " | ".join(", ".join(cells[c]) for c in COMMUNICATORS) +
              " | " + ", ".join(show(x) for x in ratios) + " | " +
              ", ".join(show(x) for x in same) + " |")


if __name__ == "__main__":
    main()
