#!/usr/bin/env python3
"""Predicted against measured step time for tools/validate_sim.sh's runs
(OUT/runs.tsv: link, name, ranks, simulator strategy, trainer JSON). Each run
is predicted by `rdmaflow simulate` with the same model, strategy, ranks,
link and steps, every rank sharing this machine's cores (--shared_cores),
each compute varying as the model's whole-step runs did when profiled
(--jitter: the calibration's step_jitter; the JITTER environment variable
overrides it).
Prints the table (every row, misses included), writes OUT/validation.json
and OUT/validation.tsv (for tools/plot_sim_validation.sh).
  sim_validation.py OUT_DIR CALIBRATION MODEL STEPS"""
import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = 0.15


def predict(rdmaflow, calibration, model, strategy, ranks, link, steps, cores, jitter):
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run(
            [rdmaflow, "simulate", "--calibration", calibration, "--model", model,
             "--strategy", strategy, "--ranks", str(ranks), "--link", link,
             "--steps", str(steps), "--shared_cores", str(cores), "--quiet",
             "--convergence", "none", "--jitter", "%.4f" % jitter,
             "--json", tmp.name],
            check=True, stdout=subprocess.DEVNULL)
        with open(tmp.name) as f:
            return json.load(f)["runs"][0]


def step_jitter(calibration, model):
    if "JITTER" in os.environ:
        return float(os.environ["JITTER"])
    with open(calibration) as f:
        for profile in json.load(f).get("models", []):
            if profile.get("model") == model:
                return float(profile.get("step_jitter", 0))
    sys.exit("sim_validation: %s has no profile of %s" % (calibration, model))


def main(out, calibration, model, steps):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rdmaflow = os.path.join(root, "bazel-bin", "cli", "rdmaflow")
    cores = os.cpu_count() or 1
    jitter = step_jitter(calibration, model)
    rows = []
    with open(os.path.join(out, "runs.tsv")) as f:
        for line in f:
            link, name, ranks, strategy, path = line.rstrip("\n").split("\t")
            with open(path) as g:
                measured = json.load(g)
            p = predict(rdmaflow, calibration, model, strategy, int(ranks), link,
                        int(steps), cores, jitter)
            if measured["mean_step_ms"] <= 0:
                sys.exit("sim_validation: %s has no step time" % path)
            error = p["step_ms"] / measured["mean_step_ms"] - 1
            rows.append({
                "link": link, "strategy": name, "ranks": int(ranks),
                "measured_step_ms": measured["mean_step_ms"],
                "predicted_step_ms": p["step_ms"],
                "measured_comm_ms": measured["mean_comm_ms"],
                "predicted_comm_ms": p["comm_ms"],
                "error": error, "within": abs(error) <= TOLERANCE,
            })
    print("# %s, %s steps, %d shared cores, compute jitter +-%.1f %%" % (
        model, steps, cores, 100 * jitter))
    print("%-8s %-16s %5s %12s %12s %8s %10s %10s" % (
        "link", "strategy", "ranks", "measured_ms", "predicted_ms", "error",
        "meas_comm", "pred_comm"))
    for r in rows:
        print("%-8s %-16s %5d %12.2f %12.2f %+7.1f%% %10.2f %10.2f%s" % (
            r["link"], r["strategy"], r["ranks"], r["measured_step_ms"],
            r["predicted_step_ms"], 100 * r["error"], r["measured_comm_ms"],
            r["predicted_comm_ms"], "" if r["within"] else "   MISS"))
    within = sum(r["within"] for r in rows)
    print("%d of %d runs within %d %% (median |error| %.1f %%)" % (
        within, len(rows), 100 * TOLERANCE,
        100 * sorted(abs(r["error"]) for r in rows)[len(rows) // 2] if rows else 0))
    with open(os.path.join(out, "validation.json"), "w") as f:
        json.dump({"model": model, "steps": int(steps), "cores": cores, "jitter": jitter,
                   "tolerance": TOLERANCE, "rows": rows}, f, indent=1)
    with open(os.path.join(out, "validation.tsv"), "w") as f:
        f.write("link\tstrategy\tranks\tmeasured_ms\tpredicted_ms\n")
        for r in rows:
            f.write("%s\t%s\t%d\t%.3f\t%.3f\n" % (r["link"], r["strategy"], r["ranks"],
                                                r["measured_step_ms"], r["predicted_step_ms"]))


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    main(*sys.argv[1:])
