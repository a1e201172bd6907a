#!/usr/bin/env python3
"""Ratios of rdmaflow to its peers from tools/peers.sh's run directory.

Usage: peers_report.py OUT_DIR REPS

Reads OUT_DIR/rep<N>/ (pingpong_{word,flag,am}.json, perftest_*.txt,
allreduce.json, mpi.json, and allreduce_loaded.json, mpi_loaded.json where
the run had a compute load, torch_{shared,cma,staged,registered}_<ranks>.jsonl
where it ran the torch bench, placement.tsv where it probed the CPUs'
placement), prints each repetition's ratios and the range over the
repetitions, and writes OUT_DIR/peers.json. A latency ratio whose two sides
ran in one placement of the CPUs (every probe around both within 1.5x of
the others) is also listed as "..., one placement"; the others compare
figures of two different machines, in effect. So are the all-reduce's
ratios to Open MPI (probes around both runs) and the torch ratios in
shared segments (probes around the run, which alternates both sides).
Beside a compute load, the work the load got while each size ran is
compared too (Open MPI's / ours: above 1, the compute got more of the
machine beside Open MPI).
"""
import json
import os
import sys


def perftest_p50(path):
    """The 50th percentile latency (us) of ucx_perftest's Final: line."""
    with open(path) as f:
        for line in f:
            if line.startswith("Final:"):
                return float(line.split()[2])
    raise SystemExit(f"peers_report: no Final: line in {path}")


def pingpong(path):
    with open(path) as f:
        rows = json.load(f)["pingpong"]["rows"]
    return {(r["op"], r["bytes"]): r for r in rows}


def allreduce_times(path):
    with open(path) as f:
        rows = json.load(f)["allreduce"]["rows"]
    return {(r["impl"], r["bytes"]): r["time_us"] for r in rows}


def load_rates(path):
    """{(impl, bytes): the compute load's iterations per second} while each
    size ran (absent in runs of earlier builds and without a load)."""
    with open(path) as f:
        rows = json.load(f)["allreduce"]["rows"]
    return {(r["impl"], r["bytes"]): r["load_iterations_per_s"] for r in rows
            if r.get("load_iterations_per_s")}


def torch_times(path):
    """{(series, bytes): us} of one torch bench run's JSON lines."""
    times = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "allreduce":
                times[(row["backend"], row["bytes"])] = row["us"]
    return times


def torch_rows(d, probes):
    """Tensors through torch.distributed against the bare collective timed
    in the same processes (each mode's run alternates them), per rank
    count: ordinary tensors in shared segments, read out of the process,
    staged, and registered ones; the measure with a target again where the
    probes around its run found one placement."""
    rows = []
    kinds = (("shared", "shared segments", ">= 0.8"), ("cma", "single-copy", ""),
             ("staged", "staged", ""), ("registered", "registered", ""))
    ranks = sorted({int(name.rsplit("_", 1)[1][:-len(".jsonl")])
                    for name in os.listdir(d)
                    if name.startswith("torch_") and name.endswith(".jsonl")})
    for n in ranks:
        for kind, label, target in kinds:
            path = os.path.join(d, f"torch_{kind}_{n}.jsonl")
            if not os.path.exists(path):
                continue
            times = torch_times(path)
            for (series, b), ours in sorted(times.items()):
                bare = times.get(("bare (same processes)", b))
                if series == kind and bare:
                    rows.append((f"torch {n} ranks {b >> 20} MiB {label}: bare / ours", bare,
                                 ours, bare / ours, target))
                    if target and one_placement(probes, (f"torch_{kind}_{n}",)):
                        rows.append((f"  (one placement) torch {n} ranks {b >> 20} MiB",
                                     bare, ours, bare / ours, target))
    return rows


def placement(d):
    """{label: (before_ns, after_ns)} of rep<N>/placement.tsv; {} without it."""
    path = os.path.join(d, "placement.tsv")
    probes = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                try:
                    probes[parts[0]] = (float(parts[1]), float(parts[2]))
                except (IndexError, ValueError):
                    continue  # "-": no probe
    return probes


def one_placement(probes, labels):
    """Whether every probe around `labels` lies within 1.5x of the others."""
    values = [v for label in labels if label in probes for v in probes[label]]
    if len(values) != 2 * len(labels):
        return False
    return max(values) <= 1.5 * min(values)


def one_rep(d):
    word = pingpong(os.path.join(d, "pingpong_word.json"))
    # Runs of earlier builds lack the later variants.
    signalled_path = os.path.join(d, "pingpong_word_signalled.json")
    signalled = pingpong(signalled_path) if os.path.exists(signalled_path) else {}
    read_inline_path = os.path.join(d, "pingpong_read_inline.json")
    read_inline = pingpong(read_inline_path) if os.path.exists(read_inline_path) else {}
    unbound_path = os.path.join(d, "pingpong_word_unbound.json")
    unbound = pingpong(unbound_path) if os.path.exists(unbound_path) else {}
    flag = pingpong(os.path.join(d, "pingpong_flag.json"))
    am = pingpong(os.path.join(d, "pingpong_am.json"))
    times = allreduce_times(os.path.join(d, "allreduce.json"))
    times.update(allreduce_times(os.path.join(d, "mpi.json")))
    probes = placement(d)
    rows = []
    for b in (8, 4096):
        put = perftest_p50(os.path.join(d, f"perftest_put_lat_{b}.txt"))
        get = perftest_p50(os.path.join(d, f"perftest_get_{b}.txt"))
        fw = word[("write", b)]["lat_p50_us"]
        rows.append((f"flagged write {b} B / ucp_put_lat", fw, put, fw / put, "<= 1.3"))
        if one_placement(probes, ("pingpong_word", f"perftest_put_lat_{b}")):
            rows.append((f"  (the same, one placement) {b} B", fw, put, fw / put, "<= 1.3"))
        if ("write", b) in signalled:
            g = signalled[("write", b)]["lat_p50_us"]
            rows.append((f"  (bound, a completion each) {b} B / ucp_put_lat", g, put, g / put,
                         ""))
        if ("write", b) in unbound:
            u = unbound[("write", b)]["lat_p50_us"]
            rows.append((f"  (unbound: checked per post) {b} B / ucp_put_lat", u, put, u / put,
                         ""))
        w = flag[("write", b)]["lat_p50_us"]
        rows.append((f"  (notified, flag inbox) {b} B / ucp_put_lat", w, put, w / put, ""))
        wa = am[("write", b)]["lat_p50_us"]
        rows.append((f"  (notify=am) {b} B / ucp_put_lat", wa, put, wa / put, ""))
        # ucx_perftest's ucp_get latency is the cost of issuing a get in a
        # stream of them, not a completed read: a bound no read can reach.
        if ("read", b) in read_inline:
            ri = read_inline[("read", b)]["lat_p50_us"]
            rows.append((f"read {b} B, inline / ucp_get (issue only)", ri, get, ri / get, ""))
        r = flag[("read", b)]["lat_p50_us"]
        rows.append((f"read {b} B, posted / ucp_get (issue only)", r, get, r / get, ""))
    w4 = flag[("write", 4096)]
    rows.append(("write 4 KiB bandwidth / memcpy (MB/s)", w4["bw_avg_mbps"],
                 w4["memcpy_mbps"], w4["ratio_to_memcpy"], ""))
    loaded, rates = {}, {}
    if os.path.exists(os.path.join(d, "allreduce_loaded.json")):
        for name in ("allreduce_loaded.json", "mpi_loaded.json"):
            loaded.update(allreduce_times(os.path.join(d, name)))
            rates.update(load_rates(os.path.join(d, name)))
    sizes = sorted({b for (impl, b) in times if impl == "rdmaflow"})
    for b in sizes:
        ours = times[("rdmaflow", b)]
        for peer, label in (("mpi", "Open MPI"), ("gloo", "Gloo")):
            if (peer, b) in times:
                target = ""
                if peer == "mpi":
                    target = ">= 2" if b >= 1 << 20 else ">= 1"
                rows.append((f"all-reduce {b} B: {label} time / ours", times[(peer, b)],
                             ours, times[(peer, b)] / ours, target))
                if peer == "mpi" and one_placement(probes, ("allreduce", "mpi")):
                    rows.append((f"  (one placement) all-reduce {b} B", times[(peer, b)], ours,
                                 times[(peer, b)] / ours, target))
    for b in sizes:
        if ("rdmaflow", b) in loaded and ("mpi", b) in loaded:
            ours = loaded[("rdmaflow", b)]
            rows.append((f"  loaded {b} B: Open MPI time / ours", loaded[("mpi", b)], ours,
                         loaded[("mpi", b)] / ours, ">= 1"))
            if one_placement(probes, ("allreduce_loaded", "mpi_loaded")):
                rows.append((f"  (one placement) loaded {b} B", loaded[("mpi", b)], ours,
                             loaded[("mpi", b)] / ours, ">= 1"))
            # What the compute beside it got: a peer that keeps its latency by
            # taking the cores from the training step's compute shows it here.
            if ("rdmaflow", b) in rates and ("mpi", b) in rates:
                rows.append((f"  loaded {b} B: compute's share, Open MPI / ours",
                             rates[("mpi", b)] / 1e6, rates[("rdmaflow", b)] / 1e6,
                             rates[("mpi", b)] / rates[("rdmaflow", b)], ""))
    return rows + torch_rows(d, probes)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out, reps = sys.argv[1], int(sys.argv[2])
    runs = [one_rep(os.path.join(out, f"rep{n}")) for n in range(1, reps + 1)]
    for n, rows in enumerate(runs, 1):
        print(f"repetition {n}")
        probes = placement(os.path.join(out, f"rep{n}"))
        if probes:
            print("  placement (cache-line round trip, ns, before/after): " + ", ".join(
                f"{label} {a:.0f}/{b:.0f}" for label, (a, b) in probes.items()))
        print(f"  {'measure':<44} {'a':>10} {'b':>10} {'a/b':>7}  target")
        for name, a, b, ratio, target in rows:
            print(f"  {name:<44} {a:>10.3f} {b:>10.3f} {ratio:>7.2f}  {target}")
    print()
    print(f"range over {reps} repetitions (latency in us; all-reduce a = peer, b = rdmaflow;"
          " compute beside it: M iterations/s)")
    print(f"  {'measure':<44} {'a/b min':>8} {'a/b max':>8}  target")
    # By name: a repetition without a measure (no loaded runs, a size
    # missing) leaves a gap instead of shifting the others.
    # A measure only some repetitions have (a one-placement row) goes right
    # after the measure it follows where it appears.
    names, targets = [], {}
    for rows in runs:
        previous = None
        for name, _, _, _, target in rows:
            if name not in targets:
                at = names.index(previous) + 1 if previous is not None else 0
                names.insert(at, name)
                targets[name] = target
            previous = name
    summary = []
    for name in names:
        found = [next((r for r in rows if r[0] == name), None) for rows in runs]
        ratios = [r[3] for r in found if r is not None]
        print(f"  {name:<44} {min(ratios):>8.2f} {max(ratios):>8.2f}  {targets[name]}"
              + ("" if len(ratios) == reps else f"  ({len(ratios)} of {reps})"))
        summary.append({"measure": name.strip(), "target": targets[name],
                        "ratios": [r[3] if r else None for r in found],
                        "a": [r[1] if r else None for r in found],
                        "b": [r[2] if r else None for r in found]})
    with open(os.path.join(out, "peers.json"), "w") as f:
        json.dump({"repetitions": reps, "rows": summary}, f, indent=1)


if __name__ == "__main__":
    main()
