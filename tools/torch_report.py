#!/usr/bin/python3
"""Reads the JSON lines of bench/torch_backend_bench.py (one file per run, in
DIR) and prints the comparison of tools/bench_torch.sh: all-reduce bus
bandwidth per size and backend with rdmaflow's speed-up over Gloo, and DDP
step time; where a configuration ran several times, the median of the runs
(the ratios are of medians). Writes DIR/torch_allreduce.tsv (for tools/plot_allreduce.sh) and
DIR/torch_report.json.

  tools/torch_report.py DIR
"""

import glob
import json
import os
import statistics
import sys

SERIES = ["rdmaflow", "rdmaflow (registered)", "gloo"]
BARE = "bare collective"
SAME = "bare (same processes)"
ASYNC = "rdmaflow (async)"
ASYNC_INLINE = "rdmaflow (async, inline)"


def bare_rows(out):
    """bench/allreduce_bench's rows (DIR/bare.<ranks>.<repeat>.json) in the
    torch bench's form, as backend "bare collective"."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "bare.*.json"))):
        with open(path) as f:
            for r in json.load(f)["allreduce"]["rows"]:
                rows.append({"kind": "allreduce", "world": r["ranks"], "bytes": r["bytes"],
                             "backend": BARE, "busbw_gbs": r["busbw_gbps"],
                             "us": r["time_us"]})
    return rows


def median_by(rows, kind, key, values):
    """{key tuple: {value: median over the runs that have it}} for each of
    `values` (a field name or a tuple of them)."""
    values = (values,) if isinstance(values, str) else values
    runs = {}
    for row in rows:
        if row["kind"] == kind:
            cell = runs.setdefault(tuple(row[k] for k in key), {})
            for value in values:
                if value in row:
                    cell.setdefault(value, []).append(row[value])
    return {k: {value: statistics.median(v) for value, v in cell.items()}
            for k, cell in runs.items()}


def main(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    if not rows:
        sys.exit(f"torch_report: no *.jsonl results in {out}")
    rows += bare_rows(out)
    allreduce = median_by(rows, "allreduce", ("world", "bytes", "backend"), ("busbw_gbs", "us"))
    # One rank: no peer, so the time is what a call through torch.distributed
    # costs by itself (bus bandwidth is zero there).
    floor = {k: v for k, v in allreduce.items() if k[0] == 1}
    allreduce = {k: v for k, v in allreduce.items() if k[0] != 1}
    for row in rows:
        row.setdefault("model", "vgg")
    ddp = median_by(rows, "ddp", ("world", "backend", "model"),
                    ("ms_per_step", "comm_ms_per_step", "hooked_ms_per_step"))
    worlds = sorted({k[0] for k in allreduce})
    sizes = sorted({k[1] for k in allreduce})
    print("All-reduce bus bandwidth, GB/s (float32 sum, synchronous calls back to back;"
          " slowest rank)")
    print(f"{'ranks':>5} {'bytes':>10} " + " ".join(f"{s:>22}" for s in SERIES) +
          f" {'rdmaflow/gloo':>14} {'registered/gloo':>16}")
    with open(os.path.join(out, "torch_allreduce.tsv"), "w") as tsv:
        tsv.write("ranks\tbytes\t" + "\t".join(s.replace(" ", "_") for s in SERIES) + "\n")
        for world in worlds:
            for size in sizes:
                bw = [allreduce.get((world, size, s), {}).get("busbw_gbs", float("nan"))
                      for s in SERIES]
                print(f"{world:>5} {size:>10} " + " ".join(f"{b:>22.3f}" for b in bw) +
                      f" {bw[0] / bw[2]:>13.2f}x {bw[1] / bw[2]:>15.2f}x")
                tsv.write(f"{world}\t{size}\t" + "\t".join(f"{b:.4f}" for b in bw) + "\n")
    small_series = ["rdmaflow", ASYNC, ASYNC_INLINE, "gloo"]
    small = sorted({(k[0], k[1]) for k in allreduce if k[2] == ASYNC})
    if small:
        print()
        print("Small calls, us per call: synchronous ones run on the caller's thread,"
              " asynchronous ones (async_op=True, then wait) on the engine thread, or with"
              " RDMAFLOW_INLINE_KB=64 on the caller's")
        print(f"{'ranks':>5} {'bytes':>10} " + " ".join(f"{s:>25}" for s in small_series))
        for world, size in small:
            us = [allreduce.get((world, size, s), {}).get("us", float("nan"))
                  for s in small_series]
            print(f"{world:>5} {size:>10} " + " ".join(f"{u:>25.1f}" for u in us))
    for (world, size, backend), cell in sorted(floor.items()):
        print(f"one rank, {size} bytes, {backend}: {cell['us']:.1f} us per call (no peer: "
              "the call's own cost through torch.distributed)")
    if any(k[2] == BARE for k in allreduce):
        print()
        print("Through torch.distributed against the bare collective (bench/allreduce_bench,"
              " same run): bus bandwidth ratio")
        print(f"{'ranks':>5} {'bytes':>10} {BARE + ' GB/s':>22} {'rdmaflow/bare':>14}"
              f" {'registered/bare':>16}")
        for world in worlds:
            for size in sizes:
                bare = allreduce.get((world, size, BARE), {}).get("busbw_gbs", float("nan"))
                bw = [allreduce.get((world, size, s), {}).get("busbw_gbs", float("nan"))
                      for s in SERIES[:2]]
                print(f"{world:>5} {size:>10} {bare:>22.3f} {bw[0] / bare:>13.2f}x"
                      f" {bw[1] / bare:>15.2f}x")
    if any(k[2] == SAME for k in allreduce):
        print()
        print("Registered tensors through torch.distributed against the ring's own all-reduce"
              " of the same tensor in the same processes (--bare, alternating): time ratio")
        print(f"{'ranks':>5} {'bytes':>10} {'registered us':>14} {'bare us':>10}"
              f" {'registered/bare':>16}")
        for world in worlds:
            for size in sizes:
                reg = allreduce.get((world, size, SERIES[1]), {}).get("us", float("nan"))
                same = allreduce.get((world, size, SAME), {}).get("us", float("nan"))
                print(f"{world:>5} {size:>10} {reg:>14.1f} {same:>10.1f} {same / reg:>15.2f}x")
    print()
    ddp_series = [s for s in SERIES if any(k[1] == s for k in ddp)]
    nan = float("nan")
    for model in sorted({k[2] for k in ddp}):
        print()
        print(f"DDP, {model}, ms per step (median, slowest rank): step time, and the time an"
              " all-reduce was in flight (timed by a comm hook, in a second run whose step"
              " time is shown beside it); \"registered\": rdmaflow_torch.allreduce_hook,"
              " the buckets in registered memory")
        for field, title in (("ms_per_step", "step"),
                             ("comm_ms_per_step", "all-reduce in flight"),
                             ("hooked_ms_per_step", "step with the timing hook")):
            print(f"  {title}")
            print(f"{'ranks':>5} " + " ".join(f"{s:>22}" for s in ddp_series) +
                  "".join(f" {'gloo/' + s.replace(' (registered)', ' reg.'):>20}"
                          for s in ddp_series if s != "gloo"))
            for world in worlds:
                v = {s: ddp.get((world, s, model), {}).get(field, nan) for s in ddp_series}
                gloo = v.get("gloo", nan)
                print(f"{world:>5} " + " ".join(f"{v[s]:>22.1f}" for s in ddp_series) +
                      "".join(f" {gloo / v[s]:>19.2f}x" for s in ddp_series if s != "gloo"))
    with open(os.path.join(out, "torch_report.json"), "w") as f:
        json.dump({"allreduce": [r for r in rows if r["kind"] == "allreduce"],
                   "ddp": [r for r in rows if r["kind"] == "ddp"]}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench-results/torch")
