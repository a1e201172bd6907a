#!/usr/bin/env python3
"""Tabulates tools/bench_hierarchical.sh's results (OUT/<rate>.json, one
BenchmarkReport per link rate; results/results.proto): per link rate and
size, the bus bandwidth and time of rdmaflow hierarchical and of one flat
ring over the same ranks, measured in the same processes, and their ratio.
Writes OUT/hierarchical.tsv (link Mbit/s, bytes, hierarchical GB/s, flat
GB/s) for tools/plot_allreduce.sh.
  hierarchical_report.py OUT_DIR RATE..."""
import json
import os
import re
import sys


def megabits(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    if not m:
        return 0  # "none": unshaped
    return float(m.group(1)) * {"k": 1e-3, "m": 1, "g": 1e3, "": 1e-6}[m.group(2)]


def main(out, rates):
    print("%9s %10s | %-13s %9s %9s %7s | %11s %11s"
          % ("link", "bytes", "algorithm", "hier", "flat", "x_flat", "hier_us", "flat_us"))
    with open(os.path.join(out, "hierarchical.tsv"), "w") as tsv:
        tsv.write("link_mbit\tbytes\thierarchical\tflat\n")
        for rate in rates:
            path = os.path.join(out, rate + ".json")
            with open(path) as f:
                report = json.load(f)
            table = {}
            for r in report["allreduce"]["rows"]:
                table.setdefault(r["bytes"], {})[r["impl"]] = r
            for b, impls in sorted(table.items()):
                if "rdmaflow" not in impls or "rdmaflow-flat" not in impls:
                    continue
                h, f_ = impls["rdmaflow"], impls["rdmaflow-flat"]
                print("%9s %10d | %-13s %9.3f %9.3f %6.2fx | %11.1f %11.1f"
                      % (rate, b, h.get("algorithm", "-"), h["busbw_gbps"], f_["busbw_gbps"],
                         h["busbw_gbps"] / f_["busbw_gbps"], h["time_us"], f_["time_us"]))
                tsv.write("%g\t%d\t%.4f\t%.4f\n"
                          % (megabits(rate), b, h["busbw_gbps"], f_["busbw_gbps"]))
    print("# bus bandwidth in GB/s (nccl-tests' convention: 2(n-1)/n x bytes / time);"
          " x_flat: hierarchical over flat, same processes, same run")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
