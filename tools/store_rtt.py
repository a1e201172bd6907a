#!/usr/bin/env python3
"""Prints the median round trip of a c10d TCPStore `add` on this host, in
microseconds (the store torchrun and rdmaflow rendezvous through), for
tools/calibrate_sim.sh. Needs torch (tools/torch_python.sh).
  store_rtt.py [PORT]"""
import datetime
import statistics
import sys
import time

import torch.distributed as dist


def main(port):
    store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=30))
    for _ in range(100):
        store.add("rtt", 0)
    samples = []
    for _ in range(20):
        begin = time.perf_counter()
        for _ in range(100):
            store.add("rtt", 0)
        samples.append((time.perf_counter() - begin) / 100 * 1e6)
    print("%.1f" % statistics.median(samples))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 29640)
