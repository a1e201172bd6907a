#!/usr/bin/env python3
"""Predicts stored validation runs again with two simulator binaries.

When the simulator's model changes, the runs it was validated against stay
what they were: this reads their measured step times (a validation .json of
tools/sim_validation.py, or its .txt table) and the calibration of the same
hour, and prints each run's error under two simulator binaries side by side,
so a change is judged on the same runs.
  tools/sim_repredict.py OLD_RDMAFLOW NEW_RDMAFLOW CALIBRATION VALIDATION [MODEL]
VALIDATION: docs/scale/validation.json (model, steps, jitter inside) or a
.txt table of tools/sim_validation.py: its '#' line gives model, steps and
jitter (rounded to 0.1 %, so OLD may differ a little from the predictions
stored there), and rows are read under its 'link strategy ranks' header
up to the next line that starts with '#'. One CALIBRATION for every run
in VALIDATION: give a file a run at a time where runs have their own.
MODEL overrides the model.
PS_SLICE_BYTES=N adds slice_bytes=N to every ps strategy with overlap=on:
the runs stored before 2026-12-05 used 1 MiB slices (1048576), where the
simulator now cuts the strategy's default (docs/scale.md).
A link the calibration did not measure is the simulator's preset of that
name, as for tools/sim_validation.py.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_validation import TOLERANCE, predict  # noqa: E402  (one place for both)


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


def blocks(path):
    """Yields (model, steps, cores, jitter, rows); each row (link, name, ranks, measured)."""
    if path.endswith(".json"):
        with open(path) as f:
            d = json.load(f)
        yield (d["model"], d["steps"], d["cores"], d["jitter"],
               [(r["link"], r["strategy"], r["ranks"], r["measured_step_ms"])
                for r in d["rows"]])
        return
    head, rows, in_table = None, [], False
    with open(path) as f:
        for line in f:
            m = re.match(r"# (\S+), (\d+) steps, (\d+) shared cores, compute jitter \+-([\d.]+) %",
                         line)
            if m:
                if head and rows:
                    yield head + (rows,)
                head = (m.group(1), int(m.group(2)), int(m.group(3)),
                        float(m.group(4)) / 100)
                rows, in_table = [], False
                continue
            if line.startswith("#"):
                in_table = False
                continue
            if re.match(r"^link\s+strategy\s+ranks\s+measured_ms", line):
                in_table = head is not None
                continue
            if not in_table:
                continue
            row = re.match(r"^(\w+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s", line)
            if head and row:
                rows.append((row.group(1), row.group(2), int(row.group(3)),
                             float(row.group(4))))
    if head and rows:
        yield head + (rows,)


def with_slices(strategy, slice_bytes):
    """The strategy with slice_bytes=N where it is ps with overlap=on."""
    if not slice_bytes or not strategy.startswith("ps:") or "overlap=on" not in strategy:
        return strategy
    if not slice_bytes.isdigit() or int(slice_bytes) < 4 or int(slice_bytes) % 4:
        sys.exit("sim_repredict: PS_SLICE_BYTES must be a positive multiple of 4, got '%s'"
                 % slice_bytes)
    return strategy + ",slice_bytes=" + slice_bytes


def main(old, new, calibration, validation, model_override=None):
    names = specs()
    # tools/bench_strategies.sh's names for the same settings.
    names.setdefault("gossip", names.get("gossip_pull", "gossip"))
    for path, what in ((old, "OLD_RDMAFLOW"), (new, "NEW_RDMAFLOW"),
                       (calibration, "CALIBRATION"), (validation, "VALIDATION")):
        if not os.path.isfile(path):
            sys.exit("sim_repredict: %s %s: no such file" % (what, path))
    within = {"old": 0, "new": 0}
    total = 0
    print("%-8s %-24s %5s %9s %9s %8s %9s %8s" % (
        "link", "run", "ranks", "measured", "old_ms", "old_err", "new_ms", "new_err"))
    for model, steps, cores, jitter, rows in blocks(validation):
        model = model_override or model
        for link, name, ranks, measured in rows:
            strategy = names.get(name)
            if strategy is None:
                sys.exit("sim_repredict: run '%s' (%s): no simulator strategy for it; "
                         "known: %s" % (name, validation, ", ".join(sorted(names))))
            strategy = with_slices(strategy, os.environ.get("PS_SLICE_BYTES"))
            errors = []
            for binary in (old, new):
                p = predict(binary, calibration, model, strategy, ranks, link, steps,
                            cores, jitter)["step_ms"]
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
        sys.exit("sim_repredict: takes 4 or 5 arguments, got %d (--help)" % (len(sys.argv) - 1))
    main(*sys.argv[1:])
