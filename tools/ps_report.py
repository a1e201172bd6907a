#!/usr/bin/env python3
"""Tables of tools/bench_ps.sh's runs: time to a target accuracy per sync
mode (from worker 0's evaluations) and the VGG step time per communicator,
as ratios to the zero-copy run. Writes OUT/report.json too.
Usage: ps_report.py OUT_DIR TARGET"""
import json
import os
import sys

from curves import time_to_target


def sync_rows(out, target):
    rows = []
    for mode in ["bsp", "asp", "ssp:3", "dssp:1:6"]:
        tag = mode.replace(":", "_")
        summary_path = os.path.join(out, f"sync_{tag}.json")
        curve_path = os.path.join(out, f"sync_{tag}.rank1.csv")
        if not (os.path.exists(summary_path) and os.path.exists(curve_path)):
            continue
        with open(summary_path) as f:
            summary = json.load(f)
        reached, best, _ = time_to_target(curve_path, target)
        rows.append({"sync": mode, "time_to_target_s": reached,
                     "best_eval_accuracy": best,
                     "final_test_accuracy": summary["test_accuracy"],
                     "wall_s": summary["wall_s"],
                     "mean_wait_ms": summary["mean_wait_ms"]})
    return rows


def comm_rows(out):
    rows = []
    for comm, pull in [("rdma", "read"), ("rdma", "send"), ("rdma_copy", "send"),
                       ("grpc", "send")]:
        path = os.path.join(out, f"comm_{comm}_{pull}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            s = json.load(f)
        rows.append({"communicator": comm, "pull": pull,
                     "step_ms": s["mean_step_ms"], "comm_ms": s["mean_comm_ms"]})
    if rows:
        base = rows[0]
        for r in rows:
            r["step_ratio"] = r["step_ms"] / base["step_ms"]
            r["comm_ratio"] = r["comm_ms"] / base["comm_ms"]
    return rows


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    sync = sync_rows(out, target)
    comm = comm_rows(out)
    # A table only for the parts that ran (PARTS=comm skips the sync runs).
    if sync:
        print(f"sync modes, LeNet-5, one worker 2x slower; target accuracy {target}")
        print(f"{'sync':<10}{'to target (s)':>15}{'best eval':>11}{'final test':>12}"
              f"{'wall (s)':>10}{'wait/step (ms)':>16}")
        for r in sync:
            t = "never" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.2f}"
            print(f"{r['sync']:<10}{t:>15}{r['best_eval_accuracy']:>11.4f}"
                  f"{r['final_test_accuracy']:>12.4f}{r['wall_s']:>10.2f}"
                  f"{r['mean_wait_ms']:>16.2f}")
        print()
    if comm:
        print("VGG-like net, bsp, step time with compute (worker 0's mean)")
        print(f"{'communicator':<14}{'pull':<6}{'step (ms)':>11}{'comm (ms)':>11}"
              f"{'step/rdma':>11}{'comm/rdma':>11}")
        for r in comm:
            print(f"{r['communicator']:<14}{r['pull']:<6}{r['step_ms']:>11.1f}"
                  f"{r['comm_ms']:>11.1f}{r['step_ratio']:>11.2f}{r['comm_ratio']:>11.2f}")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"target_accuracy": target, "sync": sync, "comm": comm}, f,
                  indent=1)


if __name__ == "__main__":
    main()
