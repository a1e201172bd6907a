#!/usr/bin/env python3
"""Merges tools/bench_allreduce.sh's results (OUT/ours-<impl>.json, OUT/mpi<N>.json)
into OUT/allreduce.json and OUT/allreduce.tsv, and prints bus bandwidth per
size: rdmaflow (the algorithm it picked), its ring alone (rdmaflow-ring,
where measured), Gloo and MPI, one thread's dst += src at that size, and
rdmaflow's ratio to Gloo and to MPI. Inputs and output are
BenchmarkReport records (results/results.proto; docs/benchmarks.md, "Result
records").
  allreduce_report.py OUT_DIR"""
import glob
import json
import os
import sys


def main(out):
    paths = sorted(glob.glob(os.path.join(out, "ours-*.json")))
    if not paths:
        sys.exit("allreduce_report: no %s/ours-*.json (run tools/bench_allreduce.sh)" % out)
    reports = {}
    for path in paths:
        with open(path) as f:
            reports[os.path.basename(path)] = json.load(f)
    rows = [r for report in reports.values() for r in report["allreduce"]["rows"]]
    # The run description and single-thread references: rdmaflow's run.
    ours = reports.get("ours-rdmaflow.json", next(iter(reports.values())))
    results = ours["allreduce"]
    for path in sorted(glob.glob(os.path.join(out, "mpi*.json"))):
        with open(path) as f:
            rows += json.load(f)["allreduce"]["rows"]
    table = {}
    for r in rows:
        table.setdefault((r["ranks"], r["bytes"]), {})[r["impl"]] = r
    print("# %s" % ours["run"]["description"])
    print("# single thread: memcpy %.2f GB/s, float32 sum %.2f GB/s"
          % (results["memcpy_gbps"], results["reduce_gbps"]))
    print("%5s %10s | %-19s %9s %9s %9s %9s | %11s %9s %9s | %8s %8s"
          % ("ranks", "bytes", "algorithm", "rdmaflow", "ring", "gloo", "mpi",
             "rdmaflow_us", "mpi_us", "dst+=src", "x_gloo", "x_mpi"))
    nan = float("nan")
    with open(os.path.join(out, "allreduce.tsv"), "w") as tsv:
        tsv.write("ranks\tbytes\trdmaflow\tring\tgloo\tmpi\n")
        for (n, b), impls in sorted(table.items()):
            series = ("rdmaflow", "rdmaflow-ring", "gloo", "mpi")
            bw = {k: impls[k]["busbw_gbps"] if k in impls else nan for k in series}
            us = {k: impls[k]["time_us"] if k in impls else nan for k in series}
            ours_row = impls.get("rdmaflow", {})
            ratio = lambda a, c: a / c if c == c and c > 0 else nan
            print("%5d %10d | %-19s %9.3f %9.3f %9.3f %9.3f | %11.1f %9.1f %9.2f | %7.2fx %7.2fx"
                  % (n, b, ours_row.get("algorithm", "-"), bw["rdmaflow"],
                     bw["rdmaflow-ring"], bw["gloo"], bw["mpi"], us["rdmaflow"],
                     us["mpi"], ours_row.get("reduce_bound_gbps", nan),
                     ratio(bw["rdmaflow"], bw["gloo"]), ratio(bw["rdmaflow"], bw["mpi"])))
            tsv.write("%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\n"
                      % (n, b, bw["rdmaflow"], bw["rdmaflow-ring"], bw["gloo"], bw["mpi"]))
    print("(bus bandwidth in GB/s: algorithm bandwidth x 2(n-1)/n)")
    with open(os.path.join(out, "allreduce.json"), "w") as f:
        json.dump({"run": ours["run"],
                   "allreduce": {"memcpy_gbps": results["memcpy_gbps"],
                                 "reduce_gbps": results["reduce_gbps"],
                                 "rows": rows}}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
