#!/usr/bin/env python3
"""All-reduce bus bandwidth and DDP step time of one torch.distributed backend.

The same script for every backend (tools/bench_torch.sh runs it under
torchrun for gloo and rdmaflow, 2 and 4 ranks, and compares):

  tools/torchrun.sh --nproc_per_node=2 bench/torch_backend_bench.py --backend rdmaflow

All-reduce: float32 tensors of 4 KiB to 64 MiB, SUM, back to back, timed
over enough iterations to move ~256 MiB (at least 5) after warm-up: the
time per call is the loop's time over its iterations, the slowest rank's
(as nccl-tests and bench/allreduce_bench time theirs, so that ratios to
the bare collective compare one statistic). Calls are synchronous
(async_op=False), or with --async_op started asynchronously and waited on.
Bus bandwidth is nccl-tests' convention, 2 (n - 1) / n * bytes / time. With --registered the rdmaflow tensors come
from rdmaflow_torch.empty (reduced in place, no staging copies), and DDP
runs with rdmaflow_torch.allreduce_hook (its buckets moved into registered
memory from the third step).

Rank r is pinned to core r mod cores, whatever the backend (--no_pin).

DDP: LeNet-5 and the VGG-like network of the examples (--models) on random Fashion-MNIST-shaped
batches (the data does not matter to the timing), median step time
(forward, backward with DDP's bucketed all-reduces, SGD step). Then the
same steps again on a second DDP model whose comm hook times every
bucket's all-reduce (divide by the world, all_reduce, as DDP's default
hook does; with --registered, rdmaflow_torch.allreduce_hook): communication time per step is the time during which at least
one bucket's all-reduce was in flight (the union of the buckets'
intervals, from the hook's call to the future's completion), median over
steps, slowest rank; the hook's own step time is reported beside it.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="rdmaflow", choices=["rdmaflow", "gloo"])
    parser.add_argument("--registered", action="store_true",
                        help="rdmaflow only: all-reduce tensors in registered memory, and "
                             "DDP's buckets too (rdmaflow_torch.allreduce_hook)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                        help="all-reduce sizes in bytes, comma-separated")
    parser.add_argument("--async_op", action="store_true",
                        help="all-reduce with async_op=True, then wait() (what DDP's "
                             "hooks do; rdmaflow runs a synchronous call on the caller's "
                             "thread, an asynchronous one on its engine thread unless "
                             "RDMAFLOW_INLINE_KB allows it)")
    parser.add_argument("--bare", action="store_true",
                        help="also time rdmaflow's own all-reduce, without "
                             "torch.distributed, of a registered tensor of the same size (the "
                             "tensor itself with --registered) in the same processes (series "
                             "\"bare (same processes)\"), alternating with the torch calls "
                             "three times, medians of each")
    parser.add_argument("--ddp_steps", type=int, default=30, help="0 skips DDP")
    parser.add_argument("--batch", type=int, default=64, help="global batch of the DDP steps")
    parser.add_argument("--models", default="lenet5,vgg",
                        help="the DDP models, comma-separated: lenet5, vgg")
    parser.add_argument("--json", default="", help="rank 0 appends one JSON line per result")
    parser.add_argument("--label", default="",
                        help="the series' name in the output (default: the backend, with "
                             "\" (registered)\" for --registered)")
    parser.add_argument("--no_pin", action="store_true",
                        help="do not pin rank r to core r mod cores (pinning keeps the "
                             "scheduler from stacking two ranks on one core, which made "
                             "timings bimodal on a 2-core machine)")
    return parser.parse_args(argv)


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def vgg():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 1024), nn.ReLU(),
        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def slowest(seconds):
    """The largest of the ranks' values (what a synchronous step waits for)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def bench_allreduce(args, world, label, emit):
    import_registered = args.backend == "rdmaflow" and args.registered
    bare = args.bare and args.backend == "rdmaflow" and world > 1
    if import_registered or bare:
        import rdmaflow_torch
    for size in [int(s) for s in args.sizes.split(",")]:
        n = size // 4
        if import_registered:
            tensor = rdmaflow_torch.empty(dist.group.WORLD, [n], torch.float32)
            tensor.fill_(1.0)
        else:
            tensor = torch.ones(n, dtype=torch.float32)
        iterations = max(5, min(200, (256 << 20) // size))
        if args.async_op:
            def call():
                dist.all_reduce(tensor, async_op=True).wait()
        else:
            def call():
                dist.all_reduce(tensor)
        for _ in range(3):
            call()
        # The bare collective on a registered tensor of the same size: the
        # tensor itself where it is one.
        bare_tensor = tensor
        if bare and not import_registered:
            bare_tensor = rdmaflow_torch.empty(dist.group.WORLD, [n], torch.float32)
            bare_tensor.fill_(1.0)
        times, bare_times = [], []
        for _ in range(3 if bare else 1):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                call()
            times.append((time.perf_counter() - start) / iterations)
            if bare:
                dist.barrier()
                bare_times.append(rdmaflow_torch._time_bare_allreduce(
                    dist.group.WORLD, bare_tensor, iterations))
        for series, measured in ((label, times), ("bare (same processes)", bare_times)):
            if not measured:
                continue
            seconds = slowest(statistics.median(measured))
            busbw = 2 * (world - 1) / world * size / seconds / 1e9
            emit({"kind": "allreduce", "backend": series, "world": world, "bytes": size,
                  "iterations": iterations, "us": seconds * 1e6, "busbw_gbs": busbw})
        del tensor, bare_tensor


def union_seconds(intervals):
    """Length of the union of (start, end) intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def ddp_steps(args, world, model, after_step=None):
    """Step times over args.ddp_steps steps after 3 warm-up steps;
    after_step(measured) is called after every step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    per_rank = args.batch // world
    x = torch.randn(per_rank, 1, 28, 28)
    y = torch.randint(0, 10, (per_rank,))
    times = []
    for step in range(args.ddp_steps + 3):
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # returns once every bucket's all-reduce completed
        optimizer.step()
        if step >= 3:
            times.append(time.perf_counter() - start)
        if after_step is not None:
            after_step(step >= 3)
    return times


def default_allreduce(_, bucket):
    """What DDP's default communication does."""
    tensor = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])


MODELS = {"lenet5": lenet5, "vgg": vgg}


def bench_ddp(args, world, label, emit, name):
    build = MODELS[name]
    hook = None
    if args.registered:
        import rdmaflow_torch
        hook = rdmaflow_torch.allreduce_hook
    torch.manual_seed(0)
    plain = nn.parallel.DistributedDataParallel(build())
    if hook is not None:
        plain.register_comm_hook(None, hook)
    plain = ddp_steps(args, world, plain)
    # The same steps with every bucket's all-reduce timed.
    intervals = []  # (start, end) of this step's buckets
    comm = []
    inner = hook or default_allreduce

    def timed_allreduce(state, bucket):
        start = time.perf_counter()
        future = inner(state, bucket)

        def done(f):
            intervals.append((start, time.perf_counter()))
            return f.value()
        return future.then(done)

    def after_step(measured):
        if measured:
            comm.append(union_seconds(intervals))
        intervals.clear()

    torch.manual_seed(0)
    hooked = nn.parallel.DistributedDataParallel(build())
    hooked.register_comm_hook(None, timed_allreduce)
    hooked_times = ddp_steps(args, world, hooked, after_step)
    emit({"kind": "ddp", "backend": label, "world": world, "model": name,
          "batch": args.batch, "steps": args.ddp_steps,
          "ms_per_step": slowest(statistics.median(plain)) * 1e3,
          "hooked_ms_per_step": slowest(statistics.median(hooked_times)) * 1e3,
          "comm_ms_per_step": slowest(statistics.median(comm)) * 1e3})


def main(argv):
    args = parse_args(argv)
    if not args.no_pin:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        os.sched_setaffinity(0, {local_rank % os.cpu_count()})
    if args.backend == "rdmaflow":
        import rdmaflow_torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    label = args.label or args.backend + (" (registered)" if args.registered else "")

    def emit(row):
        if rank != 0:
            return
        if row["kind"] == "allreduce":
            print(f"{row['backend']:22s} {world} ranks  allreduce {row['bytes']:>9d} B  "
                  f"{row['us']:10.1f} us  busbw {row['busbw_gbs']:7.3f} GB/s", flush=True)
        else:
            print(f"{label:22s} {world} ranks  DDP {row['model']} step {row['ms_per_step']:8.2f} ms, "
                  f"with the timing hook {row['hooked_ms_per_step']:8.2f} ms of which "
                  f"all-reduces in flight {row['comm_ms_per_step']:8.2f} ms", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")

    bench_allreduce(args, world, label, emit)
    if args.ddp_steps > 0:
        for name in args.models.split(","):
            if name not in MODELS:
                sys.exit(f"torch_backend_bench: unknown model '{name}' (known: lenet5, vgg)")
            bench_ddp(args, world, label, emit, name)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
