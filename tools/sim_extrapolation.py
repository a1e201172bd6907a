#!/usr/bin/env python3
"""Tabulates tools/sim_extrapolate.sh's predictions (OUT/<model>_<link>.json,
sim/sim.proto's SimulationReport): per model and link, samples per second of
each strategy at each rank count, and where the fastest strategy changes;
where the runs have a time to accuracy (a model with measured convergence),
the same for it. Writes OUT/<model>_<link>.tsv (ranks, then samples/s per
strategy) and OUT/<model>_<link>_tta.tsv (seconds to the target) for
tools/plot_sim_scale.sh.
  sim_extrapolation.py OUT_DIR "lenet5 vgg" "1gbit ib_hdr200" """
import json
import os
import sys


def label(run):
    return run["strategy"] + (":" + run["params"] if run["params"] else "")


def table_of(out, model, link, names, table, what, suffix, pick, value, cell):
    """Prints one table (a row per rank count, the `pick`-best strategy and
    where it changes) and writes OUT/<model>_<link><suffix>.tsv."""
    print("%s over %s: %s" % (model, link, what))
    print("%6s " % "ranks" + " ".join("%26s" % n[:26] for n in names) + "  best")
    previous = None
    with open(os.path.join(out, "%s_%s%s.tsv" % (model, link, suffix)), "w") as tsv:
        tsv.write("ranks\t" + "\t".join(names) + "\n")
        for ranks in sorted(table):
            row = table[ranks]
            best = pick((n for n in names if n in row), key=lambda n: value(row[n]))
            cells = " ".join("%26s" % (cell(row[n]) if n in row else "-") for n in names)
            note = best + ("  <- crosses over" if previous and best != previous else "")
            print("%6d %s  %s" % (ranks, cells, note))
            previous = best
            tsv.write("%d\t" % ranks + "\t".join(
                "%.6g" % value(row[n]) if n in row and value(row[n]) != float("inf")
                else "NaN" for n in names) + "\n")


def main(out, models, links):
    for model in models.split():
        for link in links.split():
            with open(os.path.join(out, "%s_%s.json" % (model, link))) as f:
                runs = json.load(f)["runs"]
            names = []
            table = {}
            for run in runs:
                name = label(run)
                if name not in names:
                    names.append(name)
                table.setdefault(run["ranks"], {})[name] = run
            table_of(out, model, link, names, table, "samples/s (step ms)", "", max,
                     lambda run: run["samples_per_s"],
                     lambda run: "%.0f (%.1f)" % (run["samples_per_s"], run["step_ms"]))
            if any(run.get("time_to_accuracy_s", 0) > 0 for run in runs):
                timed = [n for n in names
                         if any(r.get(n, {}).get("time_to_accuracy_s", 0) > 0
                                for r in table.values())]
                print()
                table_of(out, model, link, timed, table,
                         "seconds to the target accuracy (steps to it)", "_tta", min,
                         lambda run: run.get("time_to_accuracy_s", 0) or float("inf"),
                         lambda run: "%.1f (%d)" % (run["time_to_accuracy_s"],
                                                    int(run["steps_to_target"]))
                         if run.get("time_to_accuracy_s", 0) > 0 else "never")
            print()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    main(*sys.argv[1:])
