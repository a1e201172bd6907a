#!/usr/bin/env python3
"""DDP over rdmaflow against Gloo, the same script and run (issue 44).

  gpu_ddp_bench.py [--device cuda|cpu] [--world 2] [--steps 30] [--warmup 5]
                   [--models resnet18,transformer] [--backends rdmaflow,gloo]
                   [--small] [--deterministic] [--bucket_view] [--hook]
                   [--json PATH]

For each model and backend, `world` processes (sharing GPU 0 with
--device cuda: NCCL refuses that, rdmaflow and Gloo take it) train the
same model from the same seed on the same synthetic batches:
  - step_ms: a DDP training step (forward, backward with DDP's all-reduce
    of the gradient buckets, SGD), after `warmup` untimed ones;
  - compute_ms: the same step under no_sync() (no all-reduce), so that
    comm_share = 1 - compute_ms / step_ms;
  - the parameters after the run, compared with the first backend's:
    max_param_diff (the backends must train the same model);
  - rdmaflow's engine on the device calls, ms per timed step
    (rdmaflow_torch.stats): queued behind its earlier calls, waiting for
    the caller's stream, running the collective, copying back;
and an FSDP2 step (fully_shard on a 1-D DeviceMesh) of the transformer
over rdmaflow. ResNet-18-like: CIFAR-style, batch 64 of 3x32x32;
transformer: 4 encoder layers, d_model 256, sequence 128, batch 32.
--small shrinks both (CI runs it on CPU). --deterministic makes cuDNN use
deterministic algorithms (slower), so that the backends' parameters can be
compared to the bit: its default ones are not deterministic on a GPU.
--bucket_view builds DDP with gradient_as_bucket_view=True (the gradients
are views of the buckets: no copies into them and back). --hook registers
rdmaflow_torch.allreduce_hook on rdmaflow's DDP (Gloo keeps DDP's own):
the buckets move into the group's device pool at their second sighting
and are all-reduced there in place (moved_to_device_pool,
device_pool_allreduces in the JSON). Prints a table
last; needs
rdmaflow_torch on PYTHONPATH for the rdmaflow backend.
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
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(small):
    widths = (8, 16, 32, 64) if small else (64, 128, 256, 512)
    layers = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


class Transformer(nn.Module):
    def __init__(self, small):
        super().__init__()
        d, layers = (32, 1) if small else (256, 4)
        self.embed = nn.Embedding(1000, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


def batch(model_name, small, rank, step, device):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if model_name == "resnet18":
        n = 8 if small else 64
        x = torch.randn(n, 3, 32, 32, generator=g)
    else:
        n, seq = (4, 16) if small else (32, 128)
        x = torch.randint(0, 1000, (n, seq), generator=g)
    y = torch.randint(0, 10, (x.shape[0],), generator=g)
    return x.to(device), y.to(device)


def make_model(name, small):
    torch.manual_seed(0)
    return resnet18(small) if name == "resnet18" else Transformer(small)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed_steps(model, opt, name, args, rank, first, count, ddp_off):
    loss_fn = nn.CrossEntropyLoss()
    sync(args.device)
    start = time.perf_counter()
    for step in range(first, first + count):
        x, y = batch(name, args.small, rank, step, args.device)
        opt.zero_grad(set_to_none=True)
        if ddp_off is not None:
            with ddp_off():
                loss_fn(model(x), y).backward()
        else:
            loss_fn(model(x), y).backward()
        opt.step()
    sync(args.device)
    return (time.perf_counter() - start) * 1000 / max(count, 1)


def worker(rank, args, backend, name, port, out_dir):
    os.environ.setdefault("RDMAFLOW_TRANSPORT_PARAMS", "tls=shm")
    if backend == "rdmaflow":
        import rdmaflow_torch  # noqa: F401  (registers the backend)
    if args.device == "cuda":
        torch.cuda.set_device(0)
        if args.deterministic:
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
    # The parent's store (rendezvous_store), this run's keys under a prefix.
    dist.init_process_group(backend, store=join_store(port, f"{name}-{backend}"), rank=rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=120))
    from torch.nn.parallel import DistributedDataParallel as DDP
    result = {}
    if name == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        model = make_model("transformer", args.small).to(args.device)
        mesh = init_device_mesh(args.device, (args.world,))
        for layer in model.encoder.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        timed_steps(model, opt, "transformer", args, rank, 0, args.warmup, None)
        before = engine_times(backend)
        result["step_ms"] = timed_steps(model, opt, "transformer", args, rank, args.warmup,
                                        args.steps, None)
        result.update(engine_times(backend, before, args.steps))
    else:
        model = make_model(name, args.small).to(args.device)
        ddp = DDP(model, device_ids=[0] if args.device == "cuda" else None,
                  gradient_as_bucket_view=args.bucket_view)
        if args.hook and backend == "rdmaflow":
            import rdmaflow_torch
            ddp.register_comm_hook(None, rdmaflow_torch.allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        timed_steps(ddp, opt, name, args, rank, 0, args.warmup, None)
        before = engine_times(backend)
        result["step_ms"] = timed_steps(ddp, opt, name, args, rank, args.warmup, args.steps,
                                        None)
        result.update(engine_times(backend, before, args.steps))
        # The parameters after the same steps on every backend.
        flat = torch.cat([p.detach().float().reshape(-1).cpu() for p in ddp.parameters()])
        if rank == 0:
            torch.save(flat, os.path.join(out_dir, f"{name}-{backend}.pt"))
        result["compute_ms"] = timed_steps(ddp, opt, name, args, rank,
                                           args.warmup + args.steps, args.steps, ddp.no_sync)
        result["params"] = sum(p.numel() for p in model.parameters())
    if backend == "rdmaflow":
        import rdmaflow_torch
        stats = rdmaflow_torch.stats(dist.group.WORLD)
        for key in ("device_allreduces", "device_allgathers", "device_reduce_scatters",
                    "device_broadcasts", "device_staged_bytes", "moved_to_device_pool",
                    "moved_to_registered", "device_pool_allreduces"):
            result[key] = stats.get(key, 0)
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, f"{name}-{backend}.json"), "w") as f:
            json.dump(result, f)


ENGINE_TIMES = ("device_queued_us", "device_wait_us", "device_run_us", "device_back_us")


def engine_times(backend, before=None, steps=1):
    """rdmaflow's engine time on device calls (rdmaflow_torch.stats): the
    totals, or with `before` (the totals then) ms per step since."""
    if backend != "rdmaflow":
        return {}
    import rdmaflow_torch
    stats = rdmaflow_torch.stats(dist.group.WORLD)
    now = {key: stats.get(key, 0) for key in ENGINE_TIMES}
    if before is None:
        return now
    return {key.replace("_us", "_ms_per_step"): (now[key] - before[key]) / 1000.0 / steps
            for key in ENGINE_TIMES}


def rendezvous_store():
    """A TCPStore the parent serves for all runs, on a port the kernel picked
    and the store holds: a port found free, closed and handed to the ranks
    could be taken by another process before rank 0 binds it."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=120))


def join_store(port, run):
    """A rank's client of the parent's store, its keys under `run`'s prefix."""
    client = dist.TCPStore("127.0.0.1", port, is_master=False,
                           timeout=datetime.timedelta(seconds=120))
    return dist.PrefixStore(run + "/", client)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--models", default="resnet18,transformer")
    parser.add_argument("--backends", default="rdmaflow,gloo")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--deterministic", action="store_true",
                        help="cuDNN's deterministic algorithms (parameters comparable to the bit)")
    parser.add_argument("--bucket_view", action="store_true",
                        help="DDP's gradient_as_bucket_view=True (no copies into the buckets)")
    parser.add_argument("--hook", action="store_true",
                        help="rdmaflow_torch.allreduce_hook on rdmaflow's DDP (buckets in "
                             "the device pool, reduced in place)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_ddp_bench: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    backends = args.backends.split(",")
    rows = []
    store = rendezvous_store()
    with tempfile.TemporaryDirectory() as out_dir:
        runs = [(m, b) for m in args.models.split(",") for b in backends]
        if "rdmaflow" in backends and "transformer" in args.models.split(","):
            runs.append(("fsdp2", "rdmaflow"))
        for name, backend in runs:
            print(f"== {name} over {backend} ({args.world} processes, {args.device})", flush=True)
            start = time.perf_counter()
            try:
                mp.spawn(worker, args=(args, backend, name, store.port, out_dir),
                         nprocs=args.world, join=True)
                with open(os.path.join(out_dir, f"{name}-{backend}.json")) as f:
                    result = json.load(f)
                error = None
            except Exception as e:  # a failed run is reported, the others go on
                result, error = {}, str(e).strip().splitlines()[-1] if str(e) else repr(e)
            result.update(model=name, backend=backend, device=args.device, world=args.world,
                          wall_s=round(time.perf_counter() - start, 1))
            if error:
                result["error"] = error
            if "step_ms" in result and "compute_ms" in result:
                result["comm_share"] = max(0.0, 1 - result["compute_ms"] / result["step_ms"])
            reference = os.path.join(out_dir, f"{name}-{backends[0]}.pt")
            mine = os.path.join(out_dir, f"{name}-{backend}.pt")
            if os.path.exists(reference) and os.path.exists(mine):
                result["max_param_diff"] = float(
                    (torch.load(reference) - torch.load(mine)).abs().max())
            rows.append(result)
            print(json.dumps(result), flush=True)
    print()
    print(f"{'model':<12} {'backend':<9} {'step ms':>9} {'compute ms':>11} {'comm':>6} "
          f"{'param diff':>11}  note")
    for r in rows:
        step = r.get("step_ms")
        print(f"{r['model']:<12} {r['backend']:<9} "
              f"{'' if step is None else round(step, 2)!s:>9} "
              f"{'' if 'compute_ms' not in r else round(r['compute_ms'], 2)!s:>11} "
              f"{'' if 'comm_share' not in r else format(r['comm_share'], '.0%'):>6} "
              f"{'' if 'max_param_diff' not in r else format(r['max_param_diff'], '.1e'):>11}  "
              f"{r.get('error', '')}")
    # Where rdmaflow's engine spent each step on device calls (ms per step).
    for r in rows:
        if "device_run_ms_per_step" in r:
            print(f"{r['model']}: rdmaflow's engine per step: "
                  + ", ".join(f"{key[len('device_'):-len('_us')]} "
                              f"{r[key.replace('_us', '_ms_per_step')]:.2f} ms"
                              for key in ENGINE_TIMES))
    by = {(r["model"], r["backend"]): r for r in rows}
    for model in args.models.split(","):
        a, b = by.get((model, "rdmaflow"), {}), by.get((model, "gloo"), {})
        if "step_ms" in a and "step_ms" in b:
            print(f"{model}: rdmaflow {b['step_ms'] / a['step_ms']:.2f}x Gloo's step throughput")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "runs": rows}, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
