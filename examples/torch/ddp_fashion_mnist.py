#!/usr/bin/env python3
"""Data-parallel training of Fashion-MNIST with torch's DistributedDataParallel.

The backend is a flag: "rdmaflow" (import rdmaflow_torch registers it) or
"gloo", and nothing else changes. Run under torchrun (docs/torch.md):

  tools/torchrun.sh --nproc_per_node=2 examples/torch/ddp_fashion_mnist.py \
      --backend rdmaflow --steps 300

Every rank reads the same data set and takes its own share of each global
batch (rank r takes samples r, r + world, ... of it), so with the same seed
the result does not depend on the backend but for rounding.
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="rdmaflow", choices=["rdmaflow", "gloo"])
    parser.add_argument("--model", default="lenet5", choices=["lenet5", "vgg"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=DATA, help="Fashion-MNIST idx .gz files")
    parser.add_argument("--eval_samples", type=int, default=2000)
    parser.add_argument("--log_every", type=int, default=50)
    parser.add_argument("--save_params", default="", help="rank 0 saves the final parameters here")
    parser.add_argument("--json", default="", help="rank 0 writes a summary here")
    parser.add_argument("--staged_buckets", action="store_true",
                        help="rdmaflow: leave DDP's gradient buckets where DDP allocated "
                             "them (staged) instead of rdmaflow_torch.allreduce_hook, which "
                             "moves them into registered memory")
    return parser.parse_args(argv)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))


def make_model(name):
    if name == "lenet5":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    return nn.Sequential(  # VGG-like: 4.3 M parameters
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 1024), nn.ReLU(),
        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def main(argv):
    args = parse_args(argv)
    if args.backend == "rdmaflow":
        import rdmaflow_torch  # registers the backend
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        sys.exit(f"--batch {args.batch} is not a multiple of the {world} ranks")
    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(make_model(args.model))
    if args.backend == "rdmaflow" and not args.staged_buckets:
        # DDP's all-reduce, with its gradient buckets in registered memory.
        model.register_comm_hook(None, rdmaflow_torch.allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x, y = load(args.data, "train")
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(args.seed))
    start = time.time()
    for step in range(args.steps):
        first = (step * args.batch) % (len(y) - args.batch)
        mine = order[first + rank:first + args.batch:world]
        loss = F.cross_entropy(model(x[mine]), y[mine])
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if rank == 0 and ((step + 1) % args.log_every == 0 or step + 1 == args.steps):
            elapsed = time.time() - start
            print(f"step {step + 1}/{args.steps}  loss {loss.item():.4f}  "
                  f"{(step + 1) / elapsed:.1f} steps/s", flush=True)
    seconds = time.time() - start
    test_x, test_y = load(args.data, "t10k")
    with torch.no_grad():
        predicted = model(test_x[:args.eval_samples]).argmax(1)
    accuracy = (predicted == test_y[:args.eval_samples]).float().mean().item()
    if rank == 0:
        print(f"{args.backend}: {world} ranks, {args.steps} steps, test accuracy "
              f"{accuracy:.4f}, {1000 * seconds / args.steps:.2f} ms/step", flush=True)
        if args.save_params:
            torch.save({k: v.clone() for k, v in model.module.state_dict().items()},
                       args.save_params)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"backend": args.backend, "world": world, "model": args.model,
                           "steps": args.steps, "accuracy": accuracy,
                           "ms_per_step": 1000 * seconds / args.steps}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
