#!/usr/bin/env python3
"""The table of tools/bench_decentralized.sh's runs: per scenario and
strategy, the time rank 0 took to reach the target accuracy (median and
range over the repeats), its best evaluation, the final test accuracy, the
mean step and communication times, and for runs that failed, the step they
reached and the error. Writes OUT/report.json too.
Usage: decentralized_report.py OUT_DIR TARGET "SCENARIOS" "STRATEGIES" REPEATS
           [WHAT]   (the title's model and data; "LeNet-5 on Fashion-MNIST")"""
import json
import os
import re
import statistics
import sys

from curves import time_to_target


def first_error(log_path):
    if not os.path.exists(log_path):
        return "no log"
    with open(log_path) as f:
        for line in f:
            if ("warning:" not in line and
                    re.search(r"rdmaflow_train|UNAVAILABLE|DEADLINE_EXCEEDED", line)):
                return re.sub(r"pid \d+", "pid ...", line.strip())[:140]
    return "exited with an error"


def one_run(run, target):
    r = {}
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


def median(values):
    return statistics.median(values) if values else None


def summarize(out, scenario, name, target, repeats):
    runs = [one_run(os.path.join(out, f"{scenario}_{name}_r{i}"), target)
            for i in range(1, repeats + 1)]
    reached = [r["time_to_target_s"] for r in runs if r.get("time_to_target_s") is not None]
    done = [r for r in runs if r["completed"]]
    row = {"scenario": scenario, "strategy": name, "runs": runs,
           "completed": len(done), "repeats": repeats,
           "reached": len(reached),
           "time_to_target_median_s": median(reached),
           "time_to_target_range_s": [min(reached), max(reached)] if reached else None,
           "best_eval_median": median([r["best_eval_accuracy"] for r in runs
                                       if "best_eval_accuracy" in r]),
           "final_test_median": median([r["final_test_accuracy"] for r in done]),
           "step_ms_median": median([r["mean_step_ms"] for r in done]),
           "comm_ms_median": median([r["mean_comm_ms"] for r in done])}
    failed = [r for r in runs if not r["completed"]]
    if failed:
        row["failure"] = (f"failed after step {failed[0].get('last_step', '?')}: "
                          f"{failed[0]['error']}")
    return row


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    scenarios, strategies = sys.argv[3].split(), sys.argv[4].split()
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    what = sys.argv[6] if len(sys.argv) > 6 else "LeNet-5 on Fashion-MNIST"
    rows = [summarize(out, s, n, target, repeats) for s in scenarios for n in strategies]
    print(f"{what}, 4 ranks; time for rank 0 to reach test accuracy "
          f"{target} (evaluations excluded); medians over {repeats} run(s)")
    print(f"{'scenario':<13}{'strategy':<13}{'to target (s)':>14}{'range':>14}"
          f"{'best eval':>11}{'final test':>12}{'step (ms)':>11}{'comm (ms)':>11}  outcome")
    for r in rows:
        span = r["time_to_target_range_s"]
        span = "-" if span is None else f"{span[0]:.2f}-{span[1]:.2f}"
        outcome = (f"{r['completed']}/{r['repeats']} completed" if "failure" not in r
                   else f"{r['completed']}/{r['repeats']} completed; {r['failure']}")
        print(f"{r['scenario']:<13}{r['strategy']:<13}"
              f"{fmt(r['time_to_target_median_s'], '.2f'):>14}{span:>14}"
              f"{fmt(r['best_eval_median'], '.4f'):>11}{fmt(r['final_test_median'], '.4f'):>12}"
              f"{fmt(r['step_ms_median'], '.1f'):>11}{fmt(r['comm_ms_median'], '.2f'):>11}"
              f"  {outcome}")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"target_accuracy": target, "repeats": repeats, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
