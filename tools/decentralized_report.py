#!/usr/bin/env python3
"""The table of tools/bench_decentralized.sh's runs: per scenario and
strategy, the time rank 0 took to reach the target accuracy, its best
evaluation, the final test accuracy, the mean step time, and for a run that
failed, the step it reached and its error. Writes OUT/report.json too.
Usage: decentralized_report.py OUT_DIR TARGET "SCENARIOS" "STRATEGIES" """
import json
import os
import re
import sys

from curves import time_to_target


def first_error(log_path):
    if not os.path.exists(log_path):
        return "no log"
    with open(log_path) as f:
        for line in f:
            if re.search(r"rdmaflow_train|UNAVAILABLE|DEADLINE_EXCEEDED", line):
                return line.strip()[:160]
    return "exited with an error"


def row(out, scenario, name, target):
    run = os.path.join(out, f"{scenario}_{name}")
    r = {"scenario": scenario, "strategy": name}
    curve = run + ".rank0.csv"
    if os.path.exists(curve):
        r["time_to_target_s"], r["best_eval_accuracy"], r["last_step"] = \
            time_to_target(curve, target)
    if os.path.exists(run + ".json"):
        with open(run + ".json") as f:
            s = json.load(f)
        r.update(completed=True, final_test_accuracy=s["test_accuracy"],
                 wall_s=s["wall_s"], mean_step_ms=s["mean_step_ms"],
                 mean_comm_ms=s["mean_comm_ms"])
    else:
        r.update(completed=False, error=first_error(run + ".log"))
    return r


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    scenarios, strategies = sys.argv[3].split(), sys.argv[4].split()
    rows = [row(out, s, n, target) for s in scenarios for n in strategies]
    print(f"LeNet-5 on Fashion-MNIST, 4 ranks; time for rank 0 to reach test accuracy "
          f"{target} (evaluations excluded)")
    print(f"{'scenario':<13}{'strategy':<13}{'to target (s)':>14}{'best eval':>11}"
          f"{'final test':>12}{'step (ms)':>11}{'comm (ms)':>11}  outcome")
    for r in rows:
        t = r.get("time_to_target_s")
        t = "never" if t is None else f"{t:.2f}"
        best = f"{r['best_eval_accuracy']:.4f}" if "best_eval_accuracy" in r else "-"
        if r["completed"]:
            print(f"{r['scenario']:<13}{r['strategy']:<13}{t:>14}{best:>11}"
                  f"{r['final_test_accuracy']:>12.4f}{r['mean_step_ms']:>11.1f}"
                  f"{r['mean_comm_ms']:>11.2f}  completed")
        else:
            print(f"{r['scenario']:<13}{r['strategy']:<13}{t:>14}{best:>11}"
                  f"{'-':>12}{'-':>11}{'-':>11}  failed after step "
                  f"{r.get('last_step', '?')}: {r['error']}")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"target_accuracy": target, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
