#!/usr/bin/env python3
"""The report of tools/measure_convergence.sh: for each strategy and rank
count, the median over its runs (seeds) of the steps the evaluating rank
needed to reach the target test accuracy (a run that never did counts as
past the end; of two middle runs, the slower), with the update rule and the training ranks the simulator
gives the strategy (asked of `rdmaflow simulate`, so the keys are the
simulator's own). Writes the Convergence message of sim/sim.proto as JSON
and prints a table.
Usage: convergence_report.py --target T --eval_every N --steps N --out FILE
           --simulator BIN SPEC|RANKS|RUN_PREFIX..."""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

from curves import evaluations


def simulated_keys(simulator, spec, ranks):
    """(update_rule, workers) of `spec` at `ranks`, as the simulator says."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        subprocess.run([simulator, "simulate", "--strategy", spec, "--ranks", str(ranks),
                        "--steps", "1", "--quiet", "--convergence", "none", "--json", path],
                       check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            run = json.load(f)["runs"][0]
    return run["update_rule"], int(run["workers"])


def curve_of(prefix):
    """The evaluations of whichever rank evaluated (rank 0, or worker 0 under
    ps): [(elapsed_s, accuracy, step)]."""
    for path in sorted(glob.glob(prefix + ".rank*.csv")):
        points = evaluations(path)
        if points:
            return points
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--eval_every", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--simulator", required=True)
    parser.add_argument("--batch", type=int, default=64, help="samples a rank a step")
    parser.add_argument("runs", nargs="*", help="SPEC|RANKS|RUN_PREFIX")
    args = parser.parse_args()
    groups = {}  # (spec, ranks) -> [(steps or None, seconds or None, best)]
    for item in args.runs:
        spec, ranks, prefix = item.split("|")
        curve = curve_of(prefix)
        best = max((a for _, a, _ in curve), default=0.0)
        reached = next(((s + 1, t) for t, a, s in curve if a >= args.target), (None, None))
        groups.setdefault((spec, int(ranks)), []).append((reached[0], reached[1], best))
    points = []
    print(f"LeNet-5 on Fashion-MNIST, batch {args.batch} a rank: steps to {args.target:.0%} test "
          "accuracy (median over seeds; each seed's in brackets)")
    print(f"  {'strategy':28} {'ranks':>5} {'workers':>7} {'rule':22} {'steps':>6} "
          f"{'seconds':>8} {'best':>6}  seeds")
    for (spec, ranks), runs in groups.items():
        rule, workers = simulated_keys(args.simulator, spec, ranks)
        never = args.steps + 1  # sorts a run that never got there last
        ordered = sorted(runs, key=lambda r: never if r[0] is None else r[0])
        median = ordered[len(ordered) // 2]
        point = {"spec": spec, "update_rule": rule, "ranks": ranks, "workers": workers,
                 "steps_run": args.steps,
                 "best_accuracy": statistics.median(r[2] for r in runs)}
        if median[0] is not None:
            point["steps_to_target"] = median[0]
            point["measured_seconds_to_target"] = median[1]
        points.append(point)
        each = ",".join("-" if r[0] is None else str(r[0]) for r in runs)
        shown_rule = rule if len(rule) <= 22 else rule[:19] + "..."
        print(f"  {spec:28} {ranks:>5} {workers:>7} {shown_rule:22} "
              f"{median[0] if median[0] else 'never':>6} "
              f"{median[1] if median[1] else float('nan'):8.2f} {point['best_accuracy']:6.3f}"
              f"  [{each}]")
    if not points:
        sys.exit(f"convergence_report: no run finished; {args.out} left as it was")
    # Two specs of one rule and worker count would stand for the same
    # simulated runs (rdmaflow simulate refuses such a file).
    seen = {}
    for point in points:
        key = (point["update_rule"], point["workers"])
        if key in seen:
            sys.exit(f"convergence_report: '{seen[key]}' and '{point['spec']}' both measure rule "
                     f"{key[0]} with {key[1]} workers; measure one of them "
                     f"({args.out} left as it was)")
        seen[key] = f"{point['spec']} at {point['ranks']} ranks"
    report = {"model": "lenet5", "dataset": "fashion-mnist", "target": args.target,
              "batch": args.batch, "eval_every": args.eval_every, "points": points}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    partial = args.out + ".partial"
    with open(partial, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(partial, args.out)


if __name__ == "__main__":
    main()
