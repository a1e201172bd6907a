// File: slices.h
// -----------------------------------------------------------------------------
// The parameter server's shards cut into slices (issue 48, "overlap", after
// P3: Jayarajan et al., MLSys 2019): with ps overlap=on each slice of a
// shard is pushed, applied and pulled on its own, so that a server applies
// and republishes the slices whose gradients are in while the others are
// still on the wire, and workers pull them meanwhile. A slice is a
// contiguous range of its shard and may cut a parameter in two; it is
// complete once backward produced the gradients of every parameter it
// overlaps.
//
//   std::vector<Slice> slices = SliceShard(
//       shard, AutoSliceBytes(shard.elements * 4) / 4);
//   std::vector<SliceRef> order = PushOrder(all_slices, ready_rank);
#ifndef RDMAFLOW_STRATEGIES_PS_SLICES_H_
#define RDMAFLOW_STRATEGIES_PS_SLICES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "strategies/ps/sharding.h"

namespace rdmaflow::strategies::ps {

// Elements [offset, offset + elements) of a shard, and the parameters
// (indices in the model's list) that range overlaps, in model order.
// Value type.
struct Slice {
  int64_t offset = 0;
  int64_t elements = 0;
  std::vector<size_t> parameters;
};

// The most slices a shard may be cut into (each a transfer and a
// versioned buffer of its own).
inline constexpr int64_t kMaxSlices = 1024;
// The slices' size where slice_bytes is left to the strategy (auto): on
// the VGG-like net with 1 server and 3 workers, faster than 1 MiB over
// 100 Mbit/s, level over 1 Gbit/s and shared memory, where 128 KiB is
// slower (docs/strategies.md, "Slice size").
inline constexpr int64_t kAutoSliceBytes = int64_t{256} << 10;

// slice_bytes=auto for a shard of `shard_bytes`: kAutoSliceBytes, or the
// smallest multiple of 4 bytes (whole float32 elements) that cuts the
// shard into at most kMaxSlices. Never below 4.
int64_t AutoSliceBytes(int64_t shard_bytes);

// `shard` cut into slices of `slice_elements` each (the last one shorter),
// in shard order; the whole shard as one slice when `slice_elements` is
// not positive or not smaller than the shard.
std::vector<Slice> SliceShard(const Shard& shard, int64_t slice_elements);

// Slice `slice` of server `server`'s shard. Value type.
struct SliceRef {
  int server = 0;
  int slice = 0;
};

// Every slice of `slices` (by server), in the order backward completes
// them: by the latest `ready_rank` (by parameter: the position of its
// gradient in backward's order) of their parameters, then by server and
// slice.
std::vector<SliceRef> PushOrder(const std::vector<std::vector<Slice>>& slices,
                                const std::vector<int>& ready_rank);

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_SLICES_H_
