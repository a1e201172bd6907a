#!/usr/bin/env python3
"""Predicts stored validation runs again with another simulator binary.

When the simulator's model changes, the runs it was validated against stay
what they were: this reads their measured step times (a validation .json of
tools/sim_validation.py, or its .txt table) and the calibration of the same
hour, and prints each run's error under two simulator binaries side by side,
so a change is judged on the same runs.
  tools/sim_repredict.py OLD_RDMAFLOW NEW_RDMAFLOW CALIBRATION VALIDATION [MODEL]
VALIDATION: docs/scale/validation.json (model, steps, jitter inside) or a
.txt table whose '#' line gives model, steps and jitter. MODEL overrides.
A link the calibration did not measure is the simulator's preset of that
name, as for tools/sim_validation.py.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

TOLERANCE = 0.15


def specs():
    """Validation run names to simulator strategies (tools/validate_sim.sh)."""
    here = os.path.dirname(os.path.abspath(__file__))
    names = {}
    with open(os.path.join(here, "validate_sim.sh")) as f:
        for line in f:
            m = re.match(r'\s*"([^|"]+)\|[^|"]*\|([^|"]+)"\s*$', line)
            if m:
                names[m.group(1)] = m.group(2)
    return names


def predict(binary, calibration, model, strategy, ranks, link, steps, cores, jitter):
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run(
            [binary, "simulate", "--calibration", calibration, "--model", model,
             "--strategy", strategy, "--ranks", str(ranks), "--link", link,
             "--steps", str(steps), "--shared_cores", str(cores), "--quiet",
             "--convergence", "none", "--jitter", "%.4f" % jitter,
             "--json", tmp.name],
            check=True, stdout=subprocess.DEVNULL)
        with open(tmp.name) as f:
            return json.load(f)["runs"][0]["step_ms"]


def blocks(path):
    """Yields (model, steps, cores, jitter, rows); each row (link, name, ranks, measured)."""
    if path.endswith(".json"):
        with open(path) as f:
            d = json.load(f)
        yield (d["model"], d["steps"], d["cores"], d["jitter"],
               [(r["link"], r["strategy"], r["ranks"], r["measured_step_ms"])
                for r in d["rows"]])
        return
    head, rows = None, []
    with open(path) as f:
        for line in f:
            m = re.match(r"# (\S+), (\d+) steps, (\d+) shared cores, compute jitter \+-([\d.]+) %",
                         line)
            if m:
                if head and rows:
                    yield head + (rows,)
                head = (m.group(1), int(m.group(2)), int(m.group(3)),
                        float(m.group(4)) / 100)
                rows = []
                continue
            row = re.match(r"^(\w+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s", line)
            if head and row:
                rows.append((row.group(1), row.group(2), int(row.group(3)),
                             float(row.group(4))))
    if head and rows:
        yield head + (rows,)


def main(old, new, calibration, validation, model_override=None):
    names = specs()
    within = {"old": 0, "new": 0}
    total = 0
    print("%-8s %-24s %5s %9s %9s %8s %9s %8s" % (
        "link", "run", "ranks", "measured", "old_ms", "old_err", "new_ms", "new_err"))
    for model, steps, cores, jitter, rows in blocks(validation):
        model = model_override or model
        for link, name, ranks, measured in rows:
            # A run named as a strategy of its own (tools/bench_strategies.sh's
            # "gossip") is that strategy with its defaults.
            strategy = names.get(name, name)
            errors = []
            for binary in (old, new):
                p = predict(binary, calibration, model, strategy, ranks, link, steps,
                            cores, jitter)
                errors.append((p, p / measured - 1))
            total += 1
            within["old"] += abs(errors[0][1]) <= TOLERANCE
            within["new"] += abs(errors[1][1]) <= TOLERANCE
            print("%-8s %-24s %5d %9.2f %9.2f %+7.1f%% %9.2f %+7.1f%%" % (
                link, name, ranks, measured, errors[0][0], 100 * errors[0][1],
                errors[1][0], 100 * errors[1][1]))
    print("within %d %%: old %d of %d, new %d of %d" % (
        100 * TOLERANCE, within["old"], total, within["new"], total))


if __name__ == "__main__":
    if len(sys.argv) in (2,) and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    main(*sys.argv[1:])
