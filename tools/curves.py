"""Reading rdmaflow_train's per-step metrics logs (--log_prefix, with
--eval_every): the evaluation curve, and when it first reached a target
accuracy. Shared by the benchmark reports."""
import csv


def evaluations(csv_path):
    """[(elapsed_s, test_accuracy, step)] for the rows with an evaluation."""
    points = []
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            if row["test_accuracy"]:
                points.append((float(row["elapsed_s"]), float(row["test_accuracy"]),
                               int(row["step"])))
    return points


def time_to_target(csv_path, target):
    """(seconds when the accuracy first reached `target` or None, best
    accuracy, last step logged)."""
    reached, best, last_step = None, 0.0, -1
    for elapsed, accuracy, step in evaluations(csv_path):
        best = max(best, accuracy)
        if reached is None and accuracy >= target:
            reached = elapsed
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            last_step = int(row["step"])
    return reached, best, last_step
