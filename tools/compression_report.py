#!/usr/bin/env python3
"""Tabulates tools/bench_compression.sh's runs (OUT/<link>_<model>_<codec>.json
and .rank0.csv): per link and model, each codec's step time, wire bytes per
step, codec time, and when it first reached the uncompressed run's best test
accuracy less TARGET_SLACK (0.02), against the uncompressed run. Writes
OUT/compression.json.
  compression_report.py OUT_DIR "1gbit 100mbit" "lenet5 vgg" """
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import curves  # noqa: E402


def main(out, links, models):
    slack = float(os.environ.get("TARGET_SLACK", "0.02"))
    report = []
    print("%-8s %-7s %-34s %8s %8s %12s %7s %7s %8s %8s %8s" % (
        "link", "model", "codec", "steps", "step_ms", "wire_MB/step", "enc_ms",
        "dec_ms", "best_acc", "t_target", "sooner"))
    for link in links.split():
        for model in models.split():
            runs = []
            for path in sorted(glob.glob(os.path.join(out, "%s_%s_*.json" % (link, model)))):
                if path.endswith("compression.json"):
                    continue
                with open(path) as f:
                    summary = json.load(f)
                runs.append((path, summary))
            dense = [(p, s) for p, s in runs if not s.get("codec")]
            if not dense:
                continue
            dense_csv = dense[0][0][:-len(".json")] + ".rank0.csv"
            best = max((a for _, a, _ in curves.evaluations(dense_csv)), default=0.0)
            target = best - slack
            dense_time = curves.time_to_target(dense_csv, target)[0]
            dense_wire = dense[0][1]["wire_bytes_per_step"]
            # The uncompressed run first, then by time to the target.
            runs.sort(key=lambda r: (bool(r[1].get("codec")), r[1].get("codec", "")))
            for path, s in runs:
                csv_path = path[:-len(".json")] + ".rank0.csv"
                reached, top, last = curves.time_to_target(csv_path, target)
                row = {
                    "link": link, "model": model, "codec": s.get("codec") or "none",
                    "steps": s["steps"], "step_ms": s["mean_step_ms"],
                    "comm_ms": s["mean_comm_ms"],
                    "wire_bytes_per_step": s["wire_bytes_per_step"],
                    "wire_reduction": dense_wire / s["wire_bytes_per_step"]
                    if s["wire_bytes_per_step"] else None,
                    "encode_ms": s.get("encode_ms_per_step", 0),
                    "decode_ms": s.get("decode_ms_per_step", 0),
                    "best_accuracy": top, "target_accuracy": target,
                    "time_to_target_s": reached,
                    "sooner": dense_time / reached if reached and dense_time else None,
                }
                report.append(row)
                print("%-8s %-7s %-34s %8d %8.1f %12.3f %7.2f %7.2f %8.3f %8s %8s" % (
                    link, model, row["codec"][:34], row["steps"], row["step_ms"],
                    row["wire_bytes_per_step"] / 1e6, row["encode_ms"], row["decode_ms"],
                    top, "%.1fs" % reached if reached is not None else "never",
                    "%.2fx" % row["sooner"] if row["sooner"] else "-"))
            print("%-8s %-7s target: test accuracy %.3f (the uncompressed run's best %.3f"
                  " less %.2f)" % (link, model, target, best, slack))
    with open(os.path.join(out, "compression.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
