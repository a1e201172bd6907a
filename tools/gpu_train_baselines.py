#!/usr/bin/env python3
"""What issue 44 assumes of one GPU, measured through PyTorch alone.

  gpu_train_baselines.py [--steps 30] [--json PATH]

  - compute: one training step (forward, backward, SGD) of LeNet-5 (batch 64,
    1x28x28) and of a VGG-like net (batch 64, 3x32x32) on cuda:0, alone;
  - DDP over Gloo with CUDA tensors, two processes sharing the GPU (NCCL
    refuses that): the step time, and the time in communication (the same
    step under no_sync(), which skips DDP's all-reduce, subtracted);
  - IPC export of caching-allocator memory: whether a tensor's storage can
    be shared through CUDA IPC, with the default allocator and with
    expandable_segments (which needs another kind of handle).
Prints a table last. Needs torch with CUDA; says so and exits 2 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def vgg_like():
    layers, channels = [], 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M"):
        if width == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU()]
            channels = width
    layers += [nn.Flatten(), nn.Linear(512 * 2 * 2, 512), nn.ReLU(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


MODELS = {"lenet5": (lenet, (1, 28, 28)), "vgg_like": (vgg_like, (3, 32, 32))}


def step_ms(model, shape, steps, ddp_context=None):
    """Mean ms of a training step over `steps` after 5 untimed ones."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, *shape, device="cuda:0")
    y = torch.randint(0, 10, (64,), device="cuda:0")
    loss_fn = nn.CrossEntropyLoss()

    def one():
        opt.zero_grad(set_to_none=True)
        if ddp_context is None:
            loss_fn(model(x), y).backward()
        else:
            with ddp_context():
                loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(5):
        one()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        one()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def _ddp_rank(rank, port, steps, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = {}
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(make().cuda(0))
        synced = step_ms(model, shape, steps)
        local = step_ms(model, shape, steps, ddp_context=model.no_sync)
        params = sum(p.numel() for p in model.parameters())
        rows[name] = {"gloo_ddp_step_ms": synced, "no_sync_step_ms": local,
                      "gradient_mib": params * 4 / 2**20}
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def ddp(steps):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_ddp_rank, args=(r, port, steps, results)) for r in range(2)]
    for p in procs:
        p.start()
    rows = results.get(timeout=400)
    for p in procs:
        p.join(timeout=60)
    return rows


EXPORT_CHECK = """
import torch
t = torch.ones(1 << 20, device="cuda:0")
try:
    t.untyped_storage()._share_cuda_()
    print("exportable")
except Exception as e:
    print("refused: " + str(e).splitlines()[0][:160])
"""


def export_check(conf):
    env = dict(os.environ)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    out = subprocess.run([sys.executable, "-c", EXPORT_CHECK], env=env, capture_output=True,
                         text=True, timeout=120)
    return (out.stdout.strip() or out.stderr.strip().splitlines()[-1])[:200]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_train_baselines: torch sees no CUDA device", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    alone = {}
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        alone[name] = step_ms(make().cuda(0), shape, args.steps)
    print("compute done", flush=True)
    exports = {"default": export_check(""),
               "expandable_segments": export_check("expandable_segments:True")}
    print("export checks done", flush=True)
    rows = ddp(args.steps)
    for name in rows:
        rows[name]["alone_step_ms"] = alone[name]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                       "models": rows, "ipc_export": exports}, f, indent=1)
    print(f"\n{'model':<10} {'grad MiB':>8} {'alone ms':>9} {'DDP gloo ms':>12}"
          f" {'no_sync ms':>11} {'comm ms':>8}")
    for name, row in rows.items():
        print(f"{name:<10} {row['gradient_mib']:>8.2f} {row['alone_step_ms']:>9.3f}"
              f" {row['gloo_ddp_step_ms']:>12.3f} {row['no_sync_step_ms']:>11.3f}"
              f" {row['gloo_ddp_step_ms'] - row['no_sync_step_ms']:>8.3f}")
    for conf, result in exports.items():
        print(f"IPC export of caching-allocator memory ({conf}): {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
