"""Run by install_test.sh under plain torchrun: the installed rdmaflow_torch
module, found on the Python path with no wrapper, gives backend "rdmaflow"
to init_process_group, and an all-reduce sums across the ranks."""
import os
import sys

import torch
import torch.distributed as dist

import rdmaflow_torch  # registers the backend


def main():
    expected_dir = sys.argv[1]
    if not rdmaflow_torch.__file__.startswith(expected_dir):
        sys.exit(f"rdmaflow_torch came from {rdmaflow_torch.__file__}, not {expected_dir}")
    dist.init_process_group("rdmaflow")
    rank, world = dist.get_rank(), dist.get_world_size()
    for n in (1, 1000, 300000):
        t = torch.full((n,), float(rank + 1))
        dist.all_reduce(t)
        want = world * (world + 1) / 2
        if not torch.all(t == want):
            sys.exit(f"rank {rank}: all_reduce of {n} gave {t[0].item()}, expected {want}")
    dist.barrier()
    dist.destroy_process_group()
    print(f"install_check: rank {rank} of {world} passed")


if __name__ == "__main__":
    main()
