#!/usr/bin/env python3
"""Checks rdmaflow_torch.Codec and rdmaflow_torch.hooks under torchrun, over
the rdmaflow backend: a bad spec or tensor is a ValueError naming it; with
every element sent (topk:ratio=1) the hook gives plain DDP's parameters;
with each codec DDP trains a fixed regression (the loss falls by 40%),
the replicas stay identical and fewer bytes go to the collectives than the
dense buckets hold. Exits non-zero, naming the check, on a failure."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import rdmaflow_torch
from rdmaflow_torch import hooks


def expect(ok, what):
    if not ok:
        sys.exit(f"rank {dist.get_rank()}: {what}")


def check_errors():
    for spec, words in (("zip", "unknown gradient codec 'zip'"),
                        ("topk:ratio=7", "topk ratio must be")):
        try:
            hooks.CodecState(spec)
            expect(False, f"CodecState({spec!r}) was accepted")
        except ValueError as e:
            expect(words in str(e), f"CodecState({spec!r}): {e}")
    codec = rdmaflow_torch.Codec("topk:ratio=0.5", 0, 1, 8)
    try:
        codec.begin(torch.zeros(7), 0)
        expect(False, "a 7-element gradient for an 8-element codec was accepted")
    except ValueError as e:
        expect("8 elements" in str(e), f"wrong size: {e}")
    # One member: its own message is the sum; the top half by magnitude.
    g = torch.tensor([1., -8., 2., 7., -3., 6., 0.5, 5.])
    out = torch.zeros(8)
    rnd = codec.begin(g, 0)
    expect(rnd[0] == "all-gather", f"top-k's round is {rnd}")
    message = codec.scratch[rnd[2]:rnd[2] + rnd[3]]
    expect(codec.next([message], out, 1.0) is None, "top-k takes one round")
    expect(torch.equal(out, torch.tensor([0., -8., 0., 7., 0., 6., 0., 5.])), f"top-k: {out}")
    expect(torch.equal(codec.residual, torch.tensor([1., 0., 2., 0., -3., 0., 0.5, 0.])),
           f"residual: {codec.residual}")


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(16, 16, generator=g)
    w = torch.arange(64, dtype=torch.float32).view(4, 16) / 64 - 0.5
    return x, x @ w.t()


def train(model, rank, steps, lr=0.05):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = batch(rank, step % 4)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def params_of(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_everything_sent(rank):
    plain = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=0.001)
    hooked = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=0.001)
    hooked.register_comm_hook(hooks.CodecState("topk:ratio=1"), hooks.codec_hook)
    train(plain, rank, 6)
    train(hooked, rank, 6)
    diff = (params_of(plain) - params_of(hooked)).abs().max().item()
    expect(diff < 1e-5, f"topk:ratio=1 differs from plain DDP by {diff}")


def check_codecs(rank, world):
    for spec in ("topk:ratio=0.1", "topk:ratio=0.1,sampled=1", "randomk:ratio=0.2", "int8",
                 "sketch:rows=3,cols=60,k=40"):
        model = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=0.001)
        state = hooks.CodecState(spec)
        model.register_comm_hook(state, hooks.codec_hook)
        losses = train(model, rank, 100)
        first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
        expect(last < 0.6 * first, f"{spec}: loss {first:.4f} -> {last:.4f}")
        mine = params_of(model)
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        for r, theirs in enumerate(everyone):
            expect(torch.equal(theirs, mine), f"{spec}: rank {r}'s replica differs")
        expect(len(state.codecs) >= 1, f"{spec}: no bucket went through a codec")
        expect(0 < state.wire_bytes < state.dense_bytes,
               f"{spec}: {state.wire_bytes} bytes to the collectives for "
               f"{state.dense_bytes} dense")
        if rank == 0:
            print(f"{spec}: loss {first:.4f} -> {last:.4f}, "
                  f"{state.dense_bytes / state.wire_bytes:.1f}x fewer bytes")


def main():
    dist.init_process_group("rdmaflow")
    rank, world = dist.get_rank(), dist.get_world_size()
    check_errors()
    check_everything_sent(rank)
    check_codecs(rank, world)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("compression_hook_check: ok")


if __name__ == "__main__":
    main()
