#!/usr/bin/env python3
"""Tabulates tools/sim_extrapolate.sh's predictions (OUT/<model>_<link>.json,
sim/sim.proto's SimulationReport): per model and link, samples per second of
each strategy at each rank count, and where the fastest strategy changes.
Writes OUT/<model>_<link>.tsv (ranks, then samples/s per strategy) for
tools/plot_sim_scale.sh.
  sim_extrapolation.py OUT_DIR "lenet5 vgg" "1gbit ib_hdr200" """
import json
import os
import sys


def label(run):
    return run["strategy"] + (":" + run["params"] if run["params"] else "")


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
            print("%s over %s: samples/s (step ms)" % (model, link))
            print("%6s " % "ranks" + " ".join("%26s" % n[:26] for n in names) + "  fastest")
            previous = None
            with open(os.path.join(out, "%s_%s.tsv" % (model, link)), "w") as tsv:
                tsv.write("ranks\t" + "\t".join(names) + "\n")
                for ranks in sorted(table):
                    row = table[ranks]
                    best = max(names, key=lambda n: row[n]["samples_per_s"] if n in row else 0)
                    cells = " ".join(
                        "%26s" % ("%.0f (%.1f)" % (row[n]["samples_per_s"], row[n]["step_ms"])
                                  if n in row else "-") for n in names)
                    note = best + ("  <- crosses over" if previous and best != previous else "")
                    print("%6d %s  %s" % (ranks, cells, note))
                    previous = best
                    tsv.write("%d\t" % ranks + "\t".join(
                        "%.3f" % row[n]["samples_per_s"] if n in row else "NaN"
                        for n in names) + "\n")
            print()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    main(*sys.argv[1:])
