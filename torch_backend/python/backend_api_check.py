#!/usr/bin/env python3
"""Checks what torch 2.x asks of a c10d backend, under torchrun:
  - a device-mapped group, "cpu:rdmaflow,cuda:gloo": CPU tensors go to
    rdmaflow (its counters move), and torch reports the mapping;
  - all_gather_into_tensor and reduce_scatter_tensor (the flat forms DDP,
    FSDP and DeviceMesh use) against local references;
  - the same, coalesced (torch's _coalescing_manager, as FSDP uses it:
    allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced);
  - new_group over every rank and over a subset, each its own rdmaflow
    group;
  - a DeviceMesh over the CPU ranks and an FSDP2 (fully_shard) training
    step on it, against the same step computed whole on one rank;
  - destroy_process_group() shuts the backend down (c10d's shutdown()):
    counters stay readable, and using the group after that is an error
    that says so, not a crash.
Exits non-zero, naming the check, on a mismatch."""

import sys

import torch
import torch.distributed as dist

import rdmaflow_torch


def expect(ok, what):
    if not ok:
        sys.exit(f"rank {dist.get_rank()}: {what}")


def values(rank, n, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt * 5) % 31 - 15).to(torch.float32)


def check_fsdp2(rank, world):
    """One SGD step of a small MLP sharded with fully_shard over a 1-D CPU
    DeviceMesh: every rank's batch differs, and the step must equal the one
    taken by an unsharded copy on the mean gradient of all the batches."""
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    expect(mesh.size() == world, "DeviceMesh size")

    def mlp():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def batch(r):
        g = torch.Generator().manual_seed(100 + r)
        return torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)

    sharded = mlp()
    for layer in sharded:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    optimizer = torch.optim.SGD(sharded.parameters(), lr=0.5)
    x, y = batch(rank)
    nn.functional.cross_entropy(sharded(x), y).backward()
    optimizer.step()

    whole = mlp()
    reference = torch.optim.SGD(whole.parameters(), lr=0.5)
    loss = sum(nn.functional.cross_entropy(whole(batch(r)[0]), batch(r)[1]) for r in range(world))
    (loss / world).backward()
    reference.step()
    with torch.no_grad():
        for (name, p), q in zip(sharded.named_parameters(), whole.parameters()):
            full = p.full_tensor()
            expect(torch.allclose(full, q, atol=1e-6),
                   f"FSDP2 step: {name} differs by {float((full - q).abs().max()):.3g}")


def main():
    dist.init_process_group("cpu:rdmaflow,cuda:gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    expect(dist.get_backend() == "cpu:rdmaflow,cuda:gloo",
           f"backend reported as {dist.get_backend()!r}")
    world_group = dist.group.WORLD
    before = rdmaflow_torch.stats(world_group)
    t = values(rank, 1000)
    dist.all_reduce(t)
    expect(torch.equal(t, sum(values(r, 1000) for r in range(world))), "all_reduce")
    after = rdmaflow_torch.stats(world_group)
    expect(after["allreduces"] == before["allreduces"] + 1,
           f"a CPU all_reduce did not reach rdmaflow: {before} -> {after}")

    n = 4099
    out = torch.zeros(world * n)
    dist.all_gather_into_tensor(out, values(rank, n))
    expect(torch.equal(out, torch.cat([values(r, n) for r in range(world)])),
           "all_gather_into_tensor")
    out = torch.zeros(n)
    dist.reduce_scatter_tensor(out, torch.cat([values(rank, n, b) for b in range(world)]))
    expect(torch.equal(out, sum(values(r, n, rank) for r in range(world))),
           "reduce_scatter_tensor")

    sizes = (5, 300, 4099)
    gathered = [torch.zeros(world * k) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as manager:
        for k, out in zip(sizes, gathered):
            dist.all_gather_into_tensor(out, values(rank, k, k))
    manager.wait()
    expect(all(torch.equal(out, torch.cat([values(r, k, k) for r in range(world)]))
               for k, out in zip(sizes, gathered)), "coalesced all_gather_into_tensor")
    scattered = [torch.zeros(k) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as manager:
        for k, out in zip(sizes, scattered):
            dist.reduce_scatter_tensor(out, torch.cat([values(rank, k, b) for b in range(world)]))
    manager.wait()
    expect(all(torch.equal(out, sum(values(r, k, rank) for r in range(world)))
               for k, out in zip(sizes, scattered)), "coalesced reduce_scatter_tensor")

    everyone = dist.new_group(list(range(world)), backend="rdmaflow")
    t = values(rank, 77, 3)
    dist.all_reduce(t, group=everyone)
    expect(torch.equal(t, sum(values(r, 77, 3) for r in range(world))), "new_group all_reduce")
    evens = [r for r in range(world) if r % 2 == 0]
    sub = dist.new_group(evens, backend="rdmaflow")  # every rank calls new_group
    if rank in evens:
        t = values(rank, 10, 4)
        dist.all_reduce(t, group=sub)
        expect(torch.equal(t, sum(values(r, 10, 4) for r in evens)), "subgroup all_reduce")
        expect(dist.get_world_size(sub) == len(evens), "subgroup size")

    check_fsdp2(rank, world)

    dist.barrier()
    backend = world_group._get_backend(torch.device("cpu"))
    dist.destroy_process_group()
    counted = rdmaflow_torch.stats(backend)
    expect(counted["allreduces"] >= after["allreduces"], f"counters after shutdown: {counted}")
    try:
        rdmaflow_torch.empty(backend, [4], torch.float32)
        expect(False, "a shut-down group allocated a registered tensor")
    except RuntimeError as e:
        expect("shut down" in str(e), f"error after shutdown: {e}")
    if rank == 0:
        print(f"backend_api_check: {world} ranks passed", flush=True)


if __name__ == "__main__":
    main()
