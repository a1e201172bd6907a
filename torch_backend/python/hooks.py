"""rdmaflow_torch.hooks: DDP communication hooks that send each gradient
bucket through one of rdmaflow's gradient codecs (docs/compression.md), over
any torch.distributed backend (rdmaflow's c10d backend included).

    import rdmaflow_torch
    from rdmaflow_torch import hooks
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = hooks.CodecState("topk:ratio=0.01")
    model.register_comm_hook(state, hooks.codec_hook)

Each bucket gets a codec of its own (rdmaflow_torch.Codec), whose residual
carries what was not sent into the next step (error feedback). The codec
names the collective each round needs; the hook runs it with
torch.distributed: an all-reduce (sum or max) of a span of the codec's
scratch, or an all-gather of every rank's message. all_gather takes equal
sizes, so each message goes out padded to the codec's largest, after an
8-byte length (the C++ exchange sends messages at their length).

The hook runs its collectives one after the other on DDP's thread and
returns a completed future. Momentum is the optimizer's, applied after the
exchange; random-k with momentum can diverge there (the trainer's strategies
apply DGC's momentum correction before encoding instead).

Run by the module when it is imported (it sees Codec); this file is not
imported on its own.
"""

import torch
import torch.distributed as dist


class CodecState:
    """codec_hook's state: the codec spec, the process group (None: the
    default group), a seed every rank shares, and one codec per bucket.
    codecs maps a bucket's index to (its parameters' (id, numel), its codec);
    carried holds, by parameter id, residuals of codecs of a layout DDP
    replaced, until the new layout's buckets take them in.
    wire_bytes counts what this rank handed to the collectives; dense_bytes
    the float32 bytes of the buckets it stood in for."""

    def __init__(self, codec="topk:ratio=0.01", process_group=None, seed=0):
        validate_codec(codec)  # noqa: F821  (module scope): a bad spec fails here
        self.codec = codec
        self.process_group = process_group
        self.seed = seed
        self.codecs = {}
        self.carried = {}
        self.steps = {}
        self.wire_bytes = 0
        self.dense_bytes = 0


def _exchange(state, group, codec, buffer, world):
    """Runs the codec's rounds over `group`; `buffer` ends as the mean."""
    scratch = codec.scratch
    step = state.steps[id(codec)]
    state.steps[id(codec)] = step + 1
    rnd = codec.begin(buffer, step)
    while rnd is not None:
        exchange, dtype, offset, nbytes = rnd
        gathered = []
        if exchange == "all-gather":
            cap = codec.max_message_bytes
            mine = torch.zeros(cap + 8, dtype=torch.uint8)
            mine[:8] = torch.tensor([nbytes], dtype=torch.int64).view(torch.uint8)
            mine[8:8 + nbytes] = scratch[offset:offset + nbytes]
            parts = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(parts, mine, group=group)
            for member, part in enumerate(parts):
                length = int(part[:8].view(torch.int64)[0])  # a peer wrote it
                if not 0 <= length <= cap:
                    raise RuntimeError(
                        f"rdmaflow_torch.hooks: member {member}'s message says {length} "
                        f"bytes; the codec's largest is {cap} (another codec or version?)")
                gathered.append(part[8:8 + length])
            state.wire_bytes += (world - 1) * (cap + 8)
        else:
            view = scratch[offset:offset + nbytes].view(
                torch.float16 if dtype == "float16" else torch.float32)
            op = dist.ReduceOp.MAX if exchange == "all-reduce-max" else dist.ReduceOp.SUM
            dist.all_reduce(view, op=op, group=group)
            state.wire_bytes += nbytes
        rnd = codec.next(gathered, buffer, 1.0 / world)


def _carry_residual(state, layout, codec):
    """Keeps `codec`'s residual by parameter (buckets lay their parameters
    end to end in their order)."""
    if "feedback=0" in codec.spec:
        return  # without error feedback nothing is kept for later
    residual = codec.residual
    if sum(n for _, n in layout) != residual.numel():
        return  # not laid out as assumed: the residual is dropped
    at = 0
    for param, n in layout:
        state.carried[param] = residual[at:at + n]
        at += n


def _take_carried(state, layout, buffer):
    """Adds the carried residuals of the bucket's parameters into its
    gradient (the new codec's first input), as error feedback would have."""
    if sum(n for _, n in layout) != buffer.numel():
        return
    at = 0
    for param, n in layout:
        carried = state.carried.pop(param, None)
        if carried is not None and carried.numel() == n:
            buffer[at:at + n].add_(carried)
        at += n


def codec_hook(state, bucket):
    """DDP comm hook: the bucket's mean over the group, through the state's
    codec. Returns a completed future of the bucket."""
    if not isinstance(state, CodecState):
        raise TypeError("rdmaflow_torch.hooks.codec_hook: the state must be a "
                        f"hooks.CodecState, got {type(state).__name__}")
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32 or buffer.device.type != "cpu":
        raise TypeError("rdmaflow_torch.hooks.codec_hook: codecs take float32 CPU buckets, "
                        f"got {buffer.dtype} on {buffer.device}")
    index = bucket.index()
    layout = tuple((id(p), p.numel()) for p in bucket.parameters())
    known = state.codecs.get(index)
    if known is not None and (known[0] != layout or known[1].count != buffer.numel()):
        # DDP rebuilt its buckets (it does after the first step): every old
        # codec's residual is kept by parameter, for the new buckets.
        for old_layout, old_codec in state.codecs.values():
            _carry_residual(state, old_layout, old_codec)
        state.codecs = {}
        known = None
    if known is None:
        codec = Codec(state.codec, rank, world, buffer.numel(),  # noqa: F821
                      state.seed + index)
        state.codecs[index] = (layout, codec)
        state.steps[id(codec)] = 0
        _take_carried(state, layout, buffer)
    codec = state.codecs[index][1]
    try:
        _exchange(state, group, codec, buffer, world)
    except BaseException:
        # The codec is left inside its step: the next call starts afresh.
        state.codecs.pop(index, None)
        raise
    state.dense_bytes += buffer.numel() * 4
    future = torch.futures.Future()
    future.set_result(buffer)
    return future
