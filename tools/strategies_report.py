#!/usr/bin/env python3
"""Tabulates tools/bench_strategies.sh's runs (OUT/<link>_<strategy>.json):
step time, communication time and bytes on the wire per step, and each
strategy's speed-up over the parameter server on the same link; writes
OUT/strategies.tsv for the plot.
  strategies_report.py OUT_DIR "shm 1gbit 100mbit" """
import json
import os
import sys

STRATEGIES = ["ps", "ps_overlap", "ps_overlap_late", "ps_ssp", "ps_ssp_overlap", "ps_ssp_prefetch", "ps_asp", "ps_asp_overlap",
              "ps_asp_prefetch",
              "allreduce", "allreduce_no_overlap", "allreduce_forward", "layer_separated",
              "layer_separated_overlap", "layer_separated_auto", "layer_separated_2fc",
              "layer_separated_2fc_overlap", "gossip", "gossip_overlap", "moshpit",
              "moshpit_overlap"]


def main(out, links):
    rows = []
    for link in links.split():
        for s in STRATEGIES:
            path = os.path.join(out, "%s_%s.json" % (link, s))
            if not os.path.exists(path):
                continue
            with open(path) as f:
                rows.append((link, s, json.load(f)))
    print("%-8s %-27s %10s %10s %10s %14s %10s" % (
        "link", "strategy", "step_ms", "comm_ms", "overlap_ms", "wire_MB/step", "x_ps"))
    with open(os.path.join(out, "strategies.tsv"), "w") as tsv:
        tsv.write("link\t" + "\t".join(STRATEGIES) + "\n")
        for link in links.split():
            mine = {s: r for l, s, r in rows if l == link}
            ps = mine.get("ps", {}).get("mean_step_ms")
            for s in STRATEGIES:
                if s not in mine:
                    continue
                r = mine[s]
                # Without a ps run on the link there is nothing to divide.
                x_ps = "%9.2fx" % (ps / r["mean_step_ms"]) if ps else "%10s" % "-"
                print("%-8s %-27s %10.1f %10.1f %10.1f %14.2f %s" % (
                    link, s, r["mean_step_ms"], r["mean_comm_ms"],
                    r.get("mean_overlap_ms", 0.0),
                    r["wire_bytes_per_step"] / 1e6, x_ps))
            tsv.write(link + "\t" + "\t".join(
                "%.1f" % mine[s]["mean_step_ms"] if s in mine else "nan"
                for s in STRATEGIES) + "\n")
    print("(x_ps: the parameter server's step time over this strategy's, same "
          "link, '-' without a ps run; wire: bytes all ranks wrote or read per step)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
