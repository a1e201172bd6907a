"""rdmaflow_torch.allreduce_hook: DistributedDataParallel's all-reduce, with
its gradient buckets moved into the group's registered memory.

    import rdmaflow_torch
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, rdmaflow_torch.allreduce_hook)

The hook does what DDP's default communication does (divide the bucket by
the world size, all-reduce it) and, the second time it meets a bucket's
buffer, moves that buffer into registered memory
(rdmaflow_torch.register_repeated): DDP builds its buckets once for the
first step and rebuilds them after it, so the buffers that come back step
after step are the ones moved, from the third step on. From then on the
backend reduces them where they lie instead of copying them through its
staging area. The parameters' gradients (views of the bucket with
gradient_as_bucket_view=True) move along with it. CUDA buckets move into
the group's device pool instead (RDMAFLOW_DEVICE_POOL_MB), where their
all-reduces run in place on the device.

Run by the module when it is imported (it sees register_repeated and
_backend_of); this file is not imported on its own.
"""


def allreduce_hook(state, bucket):
    """DDP comm hook. `state`: an rdmaflow process group, or None for the
    default group. Returns the future of the bucket's average."""
    import torch.distributed as dist

    group = state if state is not None else dist.group.WORLD
    backend = _backend_of(group)  # noqa: F821  (module scope)
    if backend is None:
        raise TypeError(
            "rdmaflow_torch.allreduce_hook: the hook's state must be an rdmaflow "
            "process group or None (the default group, which must then be rdmaflow "
            f"for CPU tensors); got {type(group).__name__}")
    buffer = bucket.buffer()
    register_repeated(backend, buffer)  # noqa: F821  (module scope)
    buffer.div_(backend.size())
    if group is backend:
        work = backend.allreduce([buffer])
    else:
        work = dist.all_reduce(buffer, group=group, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])
