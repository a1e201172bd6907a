#!/usr/bin/env python3
"""The peers of bench/device_ipc_bench on one GPU, through PyTorch alone.

  gpu_peers.py [--mib 1,4,16,64,256,1024] [--iterations 20] [--json PATH]

Two processes on cuda:0, as device_ipc_bench runs:
  - raw IPC copy: rank 1 maps rank 0's tensor through torch.multiprocessing
    (cudaIpcOpenMemHandle underneath) and times copies into it and out of
    it with CUDA events; the local device copy beside them;
  - Gloo all-reduce of CUDA float32 tensors (torch.distributed stages them
    through host memory), the library users fall back to when NCCL cannot
    run (NCCL refuses two ranks on one GPU).
Prints a table last. Needs torch with CUDA; says so and exits 2 otherwise.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _events_ms(fn, iterations):
    """Mean milliseconds of fn() over `iterations` calls queued back to back."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iterations


def _ipc_child(queue, results, sizes, iterations):
    shared = queue.get()  # rank 0's tensor, mapped here
    local = torch.empty_like(shared)
    rows = []
    for nbytes in sizes:
        theirs, ours = shared[:nbytes], local[:nbytes]
        write_ms = _events_ms(lambda: theirs.copy_(ours), iterations)
        read_ms = _events_ms(lambda: ours.copy_(theirs), iterations)
        rows.append({"bytes": nbytes, "ipc_write_gbps": nbytes / write_ms / 1e6,
                     "ipc_read_gbps": nbytes / read_ms / 1e6})
    results.put(rows)
    queue.get()  # rank 0 may free its tensor only after this


def raw_ipc(sizes, iterations):
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    biggest = max(sizes)
    mine = torch.ones(biggest, dtype=torch.uint8, device="cuda:0")
    scratch = torch.empty_like(mine)
    local = {}
    for nbytes in sizes:
        ms = _events_ms(lambda: scratch[:nbytes].copy_(mine[:nbytes]), iterations)
        local[nbytes] = nbytes / ms / 1e6
    child = ctx.Process(target=_ipc_child, args=(queue, results, sizes, iterations))
    child.start()
    queue.put(mine)
    rows = results.get(timeout=300)
    queue.put("done")
    child.join(timeout=60)
    for row in rows:
        row["local_copy_gbps"] = local[row["bytes"]]
    return rows


def _gloo_rank(rank, port, sizes, iterations, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = []
    for nbytes in sizes:
        t = torch.full((nbytes // 4,), float(rank + 1), device="cuda:0")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        ok = bool((t == 3.0).all())
        for _ in range(2):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
        rows.append({"bytes": nbytes, "gloo_allreduce_us": seconds * 1e6,
                     "gloo_algbw_gbps": nbytes / seconds / 1e9, "gloo_correct": ok})
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def gloo(sizes, iterations):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = 29000 + os.getpid() % 1000
    procs = [ctx.Process(target=_gloo_rank, args=(r, port, sizes, iterations, results))
             for r in range(2)]
    for p in procs:
        p.start()
    rows = results.get(timeout=540)
    for p in procs:
        p.join(timeout=60)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="1,4,16,64,256,1024")
    parser.add_argument("--gloo_mib", default="1,4,16,64,256",
                        help="sizes for Gloo (slower: staged through host memory)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_peers: torch sees no CUDA device", file=sys.stderr)
        return 2
    sizes = [int(m) << 20 for m in args.mib.split(",")]
    gloo_sizes = [int(m) << 20 for m in args.gloo_mib.split(",")]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    ipc = raw_ipc(sizes, args.iterations)
    print("raw IPC done", flush=True)
    reduced = gloo(gloo_sizes, max(3, args.iterations // 4))
    by_size = {row["bytes"]: dict(row) for row in ipc}
    for row in reduced:
        by_size.setdefault(row["bytes"], {"bytes": row["bytes"]}).update(row)
    rows = [by_size[b] for b in sorted(by_size)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                       "rows": rows}, f, indent=1)
    print(f"\n{'MiB':>6} {'local GB/s':>11} {'IPC write':>10} {'IPC read':>10}"
          f" {'Gloo us':>11} {'Gloo GB/s':>10} ok")
    for row in rows:
        print(f"{row['bytes'] >> 20:>6} {row.get('local_copy_gbps', 0):>11.1f}"
              f" {row.get('ipc_write_gbps', 0):>10.1f} {row.get('ipc_read_gbps', 0):>10.1f}"
              f" {row.get('gloo_allreduce_us', 0):>11.1f} {row.get('gloo_algbw_gbps', 0):>10.2f}"
              f" {row.get('gloo_correct', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
