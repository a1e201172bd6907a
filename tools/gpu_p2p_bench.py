#!/usr/bin/env python3
"""Sends and receives of CUDA tensors between two processes: rdmaflow device
to device, rdmaflow through host memory, and Gloo (issue 44).

  gpu_p2p_bench.py [--device cuda|cpu] [--sizes 64K,1M,16M,64M] [--iters 30]
                   [--warmup 3] [--backends rdmaflow,rdmaflow_staged,gloo]
                   [--json PATH] [--expect_inline]

What a pipeline-parallel job does between its stages: rank 0 sends a
tensor to rank 1, which sends it back, `iters` times after `warmup`
untimed rounds, for each size (float32, on GPU 0 with --device cuda: both
processes share it, as NCCL refuses). Backends:
  - rdmaflow: torch.distributed.send/recv of the CUDA tensors; between the
    processes of one host rdmaflow copies device to device through CUDA
    IPC (docs/torch.md, "Sends and receives, device to device");
  - rdmaflow_staged: the same calls with RDMAFLOW_DEVICE_P2P=off, through
    pinned host memory;
  - gloo: Gloo moves CPU tensors only, so each side copies to the host,
    sends, receives and copies back, as a Gloo user would.
Per size and backend: the one-way time (half the round trip's mean, in
us) and GB/s (size / one-way time); each rdmaflow run's device_p2p_ipc,
device_p2p_inline and device_staged_bytes; the echoed tensor is checked
against what was sent. Prints a table last (ratios against Gloo and the
staged run); needs rdmaflow_torch on PYTHONPATH for rdmaflow.
"""
import argparse
import datetime
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_ddp_bench import join_store, rendezvous_store  # noqa: E402  (the same store)

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip().upper()
    if not text:
        raise ValueError("an empty size")
    scale = UNITS.get(text[-1], 1)
    number = text[:-1] if text[-1] in UNITS else text
    value = int(number) * scale
    if value <= 0 or value % 4:
        raise ValueError(f"size {text}: a positive multiple of 4 bytes (float32)")
    return value


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def send(tensor, peer, backend):
    if backend == "gloo" and tensor.is_cuda:
        dist.send(tensor.cpu(), peer)
    else:
        dist.send(tensor, peer)


def recv(tensor, peer, backend):
    if backend == "gloo" and tensor.is_cuda:
        host = torch.empty(tensor.shape, dtype=tensor.dtype)
        dist.recv(host, peer)
        tensor.copy_(host)
    else:
        dist.recv(tensor, peer)


def worker(rank, args, backend, port, out_dir):
    os.environ.setdefault("RDMAFLOW_TRANSPORT_PARAMS", "tls=shm")
    if backend == "rdmaflow_staged":
        os.environ["RDMAFLOW_DEVICE_P2P"] = "off"
    name = "gloo" if backend == "gloo" else "rdmaflow"
    if name == "rdmaflow":
        import rdmaflow_torch  # noqa: F401  (registers the backend)
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(name, store=join_store(port, backend), rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=120))
    peer = 1 - rank
    result = {"sizes": []}
    for size in args.sizes:
        n = size // 4
        mine = torch.empty(n, device=args.device)
        theirs = torch.empty(n, device=args.device)
        elapsed = 0.0
        for i in range(args.warmup + args.iters):
            if rank == 0:
                mine.fill_(float(i + 1))
            sync(args.device)
            start = time.perf_counter()
            if rank == 0:
                send(mine, peer, backend)
                recv(theirs, peer, backend)
            else:
                recv(theirs, peer, backend)
                send(theirs, peer, backend)
            sync(args.device)
            if i >= args.warmup:
                elapsed += time.perf_counter() - start
        row = {"bytes": size, "one_way_us": elapsed / args.iters / 2 * 1e6}
        row["gb_per_s"] = size / (row["one_way_us"] * 1e-6) / 1e9
        if rank == 0:
            row["echo_ok"] = bool(torch.equal(theirs, mine))
        result["sizes"].append(row)
    if name == "rdmaflow":
        import rdmaflow_torch
        stats = rdmaflow_torch.stats(dist.group.WORLD)
        for key in ("device_p2p_ipc", "device_p2p_inline", "device_staged_bytes"):
            result[key] = stats.get(key, 0)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, f"{backend}.json"), "w") as f:
            json.dump(result, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--sizes", default="64K,1M,16M,64M",
                        help="bytes per message, comma-separated (K, M, G suffixes)")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--backends", default="rdmaflow,rdmaflow_staged,gloo")
    parser.add_argument("--json")
    parser.add_argument("--expect_inline", action="store_true",
                        help="fail unless every rdmaflow send went inline (memory CUDA IPC "
                             "cannot export, as under expandable segments): "
                             "device_p2p_inline > 0 and device_p2p_ipc 0")
    args = parser.parse_args()
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError as e:
        parser.error(f"--sizes: {e}")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be 1 or more and --warmup 0 or more")
    backends = args.backends.split(",")
    for backend in backends:
        if backend not in ("rdmaflow", "rdmaflow_staged", "gloo"):
            parser.error(f"--backends: unknown backend {backend!r} "
                         "(rdmaflow, rdmaflow_staged, gloo)")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_p2p_bench: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    runs = []
    store = rendezvous_store()
    with tempfile.TemporaryDirectory() as out_dir:
        for backend in backends:
            print(f"== send/recv over {backend} (2 processes, {args.device})", flush=True)
            start = time.perf_counter()
            try:
                mp.spawn(worker, args=(args, backend, store.port, out_dir), nprocs=2,
                         join=True)
                with open(os.path.join(out_dir, f"{backend}.json")) as f:
                    result = json.load(f)
                error = None
            except Exception as e:  # a failed run is reported, the others go on
                result, error = {}, str(e).strip().splitlines()[-1] if str(e) else repr(e)
            result.update(backend=backend, device=args.device,
                          wall_s=round(time.perf_counter() - start, 1))
            if error:
                result["error"] = error
            runs.append(result)
            print(json.dumps(result), flush=True)
    by = {r["backend"]: {s["bytes"]: s for s in r.get("sizes", [])} for r in runs}
    print()
    print(f"{'bytes':>10} {'backend':<16} {'one-way us':>11} {'GB/s':>7} {'vs gloo':>8} "
          f"{'vs staged':>10}  echo")
    for size in args.sizes:
        for r in runs:
            row = by[r["backend"]].get(size)
            if row is None:
                print(f"{size:>10} {r['backend']:<16} {'':>11} {'':>7} {'':>8} {'':>10}  "
                      f"{r.get('error', 'no result')}")
                continue
            ratios = []
            for peer in ("gloo", "rdmaflow_staged"):
                other = by.get(peer, {}).get(size)
                ratios.append("" if other is None or peer == r["backend"]
                              else f"{other['one_way_us'] / row['one_way_us']:.2f}x")
            print(f"{size:>10} {r['backend']:<16} {row['one_way_us']:>11.1f} "
                  f"{row['gb_per_s']:>7.2f} {ratios[0]:>8} {ratios[1]:>10}  "
                  f"{'ok' if row.get('echo_ok', True) else 'WRONG'}")
    for r in runs:
        if "device_p2p_ipc" in r:
            print(f"{r['backend']}: device_p2p_ipc {r['device_p2p_ipc']}, device_p2p_inline "
                  f"{r['device_p2p_inline']}, device_staged_bytes {r['device_staged_bytes']} "
                  "(rank 0)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                       "runs": runs}, f, indent=1)
    wrong = [r["backend"] for r in runs
             if "error" in r or not all(s.get("echo_ok", True) for s in r.get("sizes", []))]
    if args.expect_inline:
        for r in runs:
            if r["backend"] == "rdmaflow" and (r.get("device_p2p_ipc", 0) != 0 or
                                               r.get("device_p2p_inline", 0) == 0):
                print(f"rdmaflow: expected every send inline, got device_p2p_ipc "
                      f"{r.get('device_p2p_ipc')}, device_p2p_inline "
                      f"{r.get('device_p2p_inline')}", file=sys.stderr)
                wrong.append("rdmaflow (inline)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
