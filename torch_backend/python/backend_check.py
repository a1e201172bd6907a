#!/usr/bin/env python3
"""Checks the rdmaflow backend from Python, under torchrun: every collective
(reduce, gather and scatter from every root too) against a reference computed
locally (several dtypes and sizes), send/recv with tags received out of
order, registered tensors reduced in place, DDP with rdmaflow_torch's comm
hook (its buckets moved into registered memory) against plain DDP, and
errors raised from wait(). Exits non-zero, naming the check, on a mismatch."""

import os
import sys

import numpy
import torch
import torch.distributed as dist
import torch.nn as nn

import rdmaflow_torch


def values(rank, n, dtype, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt * 5) % 31 - 15).to(dtype)


def expect(ok, what):
    if not ok:
        sys.exit(f"rank {dist.get_rank()}: {what}")


def check_inline(group, rank, world):
    """Synchronous calls (async_op=False) run on the calling thread while
    the engine sleeps, whatever their size. Asynchronous ones do only with
    RDMAFLOW_INLINE_KB set and within it; no call does while a receive is
    pending. Every result is right either way."""
    inline_on = int(os.environ.get("RDMAFLOW_INLINE_KB", "0")) >= 4

    def inline_calls():
        return rdmaflow_torch.stats(group)["inline_calls"]

    def expected(n, salt=0):
        return sum(values(r, n, torch.float32, salt) for r in range(world))

    before = inline_calls()
    for salt in range(5):
        t = values(rank, 1000, torch.float32, salt)
        dist.all_reduce(t)
        expect(torch.equal(t, expected(1000, salt)), "small all_reduce")
    big = values(rank, 1 << 18, torch.float32)  # 1 MiB, past RDMAFLOW_INLINE_KB
    dist.all_reduce(big)
    expect(torch.equal(big, expected(1 << 18)), "synchronous 1 MiB all_reduce")
    # The engine thread sleeps between synchronous calls: at most the first
    # may find it still awake.
    sync = inline_calls() - before
    expect(sync >= 5, f"{sync} of 6 synchronous all_reduces ran inline")
    before = inline_calls()
    small = [values(rank, 1000, torch.float32, salt) for salt in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in small]
    for work in works:
        work.wait()
    expect(all(torch.equal(t, expected(1000, salt)) for salt, t in enumerate(small)),
           "asynchronous small all_reduce")
    asynchronous = inline_calls() - before
    expect(asynchronous >= 1 if inline_on else asynchronous == 0,
           f"{asynchronous} of 5 asynchronous small all_reduces ran inline "
           f"(RDMAFLOW_INLINE_KB {os.environ.get('RDMAFLOW_INLINE_KB', 'unset')})")
    before = inline_calls()
    big = values(rank, 1 << 16, torch.float32)  # 256 KiB: past RDMAFLOW_INLINE_KB
    dist.all_reduce(big, async_op=True).wait()
    expect(torch.equal(big, expected(1 << 16)), "asynchronous 256 KiB all_reduce")
    expect(inline_calls() == before, "an asynchronous 256 KiB all_reduce ran inline")
    # Rank 0 waits for a message rank 1 sends only after the all-reduce:
    # rank 0's all-reduce must not run inline ahead of its pending receive's
    # progress, and both complete.
    got = torch.zeros(300, dtype=torch.float64)
    pending = dist.irecv(got, 1, tag=77) if rank == 0 else None
    before = rdmaflow_torch.stats(group)
    t = values(rank, 10, torch.float32)
    dist.all_reduce(t)
    after = rdmaflow_torch.stats(group)
    if rank == 1:
        dist.send(values(1, 300, torch.float64, 77), 0, tag=77)
    if rank == 0:
        pending.wait()
        expect(torch.equal(got, values(1, 300, torch.float64, 77)), "receive beside an all_reduce")
        expect(after["inline_calls"] == before["inline_calls"],
               "an all_reduce ran inline while a receive was pending")
    expect(torch.equal(t, sum(values(r, 10, torch.float32) for r in range(world))),
           "all_reduce beside a receive")


def check_moves(group, rank, world):
    """move_to_registered and register_repeated on plain tensors."""
    t = values(rank, 5000, torch.float32)
    view = t[100:200]
    before = rdmaflow_torch.stats(group)
    expect(not rdmaflow_torch.register_repeated(group, t), "first sighting moved")
    expect(rdmaflow_torch.register_repeated(group, t), "second sighting not moved")
    expect(rdmaflow_torch.register_repeated(group, t), "moved tensor not seen as registered")
    expect(torch.equal(t, values(rank, 5000, torch.float32)), "moved tensor changed")
    view.fill_(1)  # the view moved with it
    expect(torch.equal(t[100:200], torch.ones(100)), "view not moved along")
    t.copy_(values(rank, 5000, torch.float32))
    dist.all_reduce(t)
    after = rdmaflow_torch.stats(group)
    expect(torch.equal(t, sum(values(r, 5000, torch.float32) for r in range(world))),
           "all_reduce of a moved tensor")
    expect(after["moved_to_registered"] == before["moved_to_registered"] + 1 and
           after["zero_copy_allreduces"] == before["zero_copy_allreduces"] + 1,
           f"moved tensor not reduced in place: {before} -> {after}")
    for bad, why in ((values(rank, 64, torch.float32)[8:], "whole of its storage"),
                     (torch.from_numpy(numpy.zeros(64, dtype=numpy.float32)), "from_numpy"),
                     (torch.empty(256 << 20, dtype=torch.uint8), "cannot hold")):
        try:
            rdmaflow_torch.move_to_registered(group, bad)
            expect(False, f"move_to_registered did not refuse ({why})")
        except RuntimeError as e:
            expect(why in str(e), f"move_to_registered error: {e}")
    del t, view


def check_bare(group, rank, world):
    """The benchmarks' bare all-reduce: the ring's own sum of a registered
    tensor, in place, `iterations` times; anything else refused."""
    t = rdmaflow_torch.empty(group, [3000], torch.float32)
    t.fill_(1.0)
    seconds = rdmaflow_torch._time_bare_allreduce(group, t, 3)
    expect(seconds > 0, f"bare all-reduce took {seconds} s a call")
    expect(torch.equal(t, torch.full([3000], float(world ** 3))),
           "three bare all-reduces did not sum in place")
    try:
        rdmaflow_torch._time_bare_allreduce(group, torch.ones(10), 1)
        expect(False, "a bare all-reduce of an unregistered tensor was not refused")
    except RuntimeError as e:
        expect("registered pool" in str(e), f"unexpected refusal: {e}")


def check_ddp_hook(group, rank, world, as_view):
    """A few DDP steps with rdmaflow_torch.allreduce_hook against the same
    steps on plain DDP: the same parameters, and the buckets all-reduced in
    place once moved (from the third step)."""
    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    # 1.1 MB of gradients in small buckets (DDP's first holds 1 MB), so
    # there are several.
    start = rdmaflow_torch.stats(group)
    plain = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=0.01,
                                                gradient_as_bucket_view=as_view)
    hooked = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=0.01,
                                                 gradient_as_bucket_view=as_view)
    hooked.register_comm_hook(None, rdmaflow_torch.allreduce_hook)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    steps = 6
    for model in (plain, hooked):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(steps):
            if model is hooked and step == 3:
                before = rdmaflow_torch.stats(group)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    after = rdmaflow_torch.stats(group)
    what = f"DDP hook (gradient_as_bucket_view={as_view})"
    for p, q in zip(plain.parameters(), hooked.parameters()):
        expect(torch.allclose(p, q, rtol=1e-5, atol=1e-6), f"{what}: parameters differ")
    moved = before["moved_to_registered"] - start["moved_to_registered"]
    expect(moved >= 2 and after["moved_to_registered"] == before["moved_to_registered"],
           f"{what}: {moved} buckets moved by the third step, then "
           f"{after['moved_to_registered'] - before['moved_to_registered']}")
    allreduces = after["allreduces"] - before["allreduces"]
    expect(allreduces >= 2 * (steps - 3) and
           after["zero_copy_allreduces"] - before["zero_copy_allreduces"] == allreduces,
           f"{what}: buckets not reduced in place: {before} -> {after}")
    expect(after["moves_refused"] == 0, f"{what}: moves refused: {after}")


def check_shared(group, rank, world):
    """RDMAFLOW_SHARED_TENSORS=on (the test sets it in one of its runs):
    plain tensors from RDMAFLOW_SHARED_TENSORS_MIN_KB on lie in shared
    segments, reduced in place and read by the peers where they lie."""
    stats = rdmaflow_torch.stats(group)
    on = os.environ.get("RDMAFLOW_SHARED_TENSORS") == "on"
    if not on or stats["single_copy_reads"] != 1:
        expect(stats["shared_tensors"] == 0, f"shared tensors on unasked: {stats}")
        return
    expect(stats["shared_tensors"] == 1, f"shared tensor allocator not installed: {stats}")
    for round_ in range(2):
        t = values(rank, 1 << 18, torch.float32, round_)
        before = rdmaflow_torch.stats(group)
        dist.all_reduce(t)
        after = rdmaflow_torch.stats(group)
        expect(torch.equal(t, sum(values(r, 1 << 18, torch.float32, round_)
                                  for r in range(world))), "shared all_reduce")
        expect(after["shared_tensor_allreduces"] == before["shared_tensor_allreduces"] + 1
               and after["staged_bytes"] == before["staged_bytes"],
               f"a 1 MiB plain tensor was not reduced in its segment: {before} -> {after}")
    expect(after["peer_segment_reads"] > 0 and after["peer_segment_fallbacks"] == 0,
           f"the peers' segments were not read where they lie: {after}")


def main():
    dist.init_process_group("rdmaflow")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    expect(dist.get_backend() == "rdmaflow", "backend name")
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        for n in (1, 4099, 1 << 18):
            what = f"{dtype} x{n}"
            t = values(rank, n, dtype)
            dist.all_reduce(t)
            expect(torch.equal(t, sum(values(r, n, dtype) for r in range(world))),
                   f"all_reduce {what}")
            t = values(rank, n, dtype)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            expect(torch.equal(t, torch.stack([values(r, n, dtype) for r in range(world)]).amax(0)),
                   f"all_reduce max {what}")
            for root in range(world):
                t = values(rank, n, dtype, root)
                dist.broadcast(t, src=root)
                expect(torch.equal(t, values(root, n, dtype, root)), f"broadcast {what}")
            out = [torch.zeros(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(out, values(rank, n, dtype))
            expect(all(torch.equal(out[r], values(r, n, dtype)) for r in range(world)),
                   f"all_gather {what}")
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, [values(rank, n, dtype, b) for b in range(world)])
            expect(torch.equal(out, sum(values(r, n, dtype, rank) for r in range(world))),
                   f"reduce_scatter {what}")
    for root in range(world):
        t = values(rank, 999, torch.float64)
        dist.reduce(t, dst=root)
        expected = sum(values(r, 999, torch.float64) for r in range(world))
        expect(rank != root or torch.equal(t, expected), f"reduce to {root}")
        gathered = [torch.zeros(999, dtype=torch.int64) for _ in range(world)] if rank == root else None
        dist.gather(values(rank, 999, torch.int64), gathered, dst=root)
        expect(rank != root or all(torch.equal(gathered[r], values(r, 999, torch.int64))
                                   for r in range(world)), f"gather to {root}")
        part = torch.zeros(999)
        dist.scatter(part, [values(root, 999, torch.float32, r) for r in range(world)]
                     if rank == root else None, src=root)
        expect(torch.equal(part, values(root, 999, torch.float32, rank)), f"scatter from {root}")
    t = values(rank, 1000, torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    expect(torch.allclose(t, sum(values(r, 1000, torch.float32) for r in range(world)) / world),
           "all_reduce avg")
    # All-to-all: single tensors with uneven splits (rank s sends rank d s + d + 1
    # elements), and lists.
    sizes_in = [rank + d + 1 for d in range(world)]
    sizes_out = [s + rank + 1 for s in range(world)]
    send = torch.cat([values(rank, n, torch.float32, d) for d, n in enumerate(sizes_in)])
    recv = torch.zeros(sum(sizes_out))
    dist.all_to_all_single(recv, send, output_split_sizes=sizes_out, input_split_sizes=sizes_in)
    expect(torch.equal(recv, torch.cat([values(s, n, torch.float32, rank)
                                        for s, n in enumerate(sizes_out)])),
           "all_to_all_single")
    outs = [torch.zeros(7, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, [values(rank, 7, torch.int64, d) for d in range(world)])
    expect(all(torch.equal(outs[s], values(s, 7, torch.int64, rank)) for s in range(world)),
           "all_to_all")
    # Out-of-order tags: even ranks send tags 1, 2, 3; odd ranks receive 3, 2, 1.
    peer = rank ^ 1
    if peer < world:
        if rank % 2 == 0:
            works = [dist.isend(values(rank, 100 * tag, torch.float64, tag), peer, tag=tag)
                     for tag in (1, 2, 3)]
        else:
            got = {tag: torch.zeros(100 * tag, dtype=torch.float64) for tag in (3, 2, 1)}
            works = [dist.irecv(got[tag], peer, tag=tag) for tag in (3, 2, 1)]
        for work in works:
            work.wait()
        if rank % 2 == 1:
            for tag in (1, 2, 3):
                expect(torch.equal(got[tag], values(peer, 100 * tag, torch.float64, tag)),
                       f"recv tag {tag}")
    # Registered memory: reduced in place, counted.
    before = rdmaflow_torch.stats(group)
    t = rdmaflow_torch.empty(group, [1 << 16], torch.float32)
    t.copy_(values(rank, 1 << 16, torch.float32))
    dist.all_reduce(t)
    after = rdmaflow_torch.stats(group)
    expect(torch.equal(t, sum(values(r, 1 << 16, torch.float32) for r in range(world))),
           "registered all_reduce")
    expect(after["zero_copy_allreduces"] == before["zero_copy_allreduces"] + 1,
           f"registered tensor not reduced in place: {before} -> {after}")
    del t
    check_shared(group, rank, world)
    check_inline(group, rank, world)
    check_moves(group, rank, world)
    check_bare(group, rank, world)
    for as_view in (False, True):
        check_ddp_hook(group, rank, world, as_view)
    # Errors surface as exceptions.
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BXOR)
        expect(False, "BXOR did not raise")
    except RuntimeError as e:
        expect("supports SUM" in str(e), f"BXOR error: {e}")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"backend_check: {world} ranks passed", flush=True)


if __name__ == "__main__":
    main()
