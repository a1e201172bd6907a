// File: slices.cc
#include "strategies/ps/slices.h"

#include <algorithm>
#include <tuple>

namespace rdmaflow::strategies::ps {

int64_t AutoSliceBytes(int64_t shard_bytes) {
  // The fewest bytes a slice needs for at most kMaxSlices of them, in
  // whole elements (each step divides before it adds: no input overflows).
  const int64_t elements = std::max<int64_t>(shard_bytes, 0) / 4 +
                           (std::max<int64_t>(shard_bytes, 0) % 4 != 0 ? 1 : 0);
  const int64_t per_slice = elements / kMaxSlices + (elements % kMaxSlices != 0 ? 1 : 0);
  return std::max(kAutoSliceBytes, std::max<int64_t>(per_slice, 1) * 4);
}

std::vector<Slice> SliceShard(const Shard& shard, int64_t slice_elements) {
  if (slice_elements <= 0 || slice_elements >= shard.elements) {
    slice_elements = std::max<int64_t>(shard.elements, 1);
  }
  std::vector<Slice> slices;
  for (int64_t offset = 0; offset < shard.elements; offset += slice_elements) {
    Slice slice;
    slice.offset = offset;
    slice.elements = std::min(slice_elements, shard.elements - offset);
    const int64_t end = offset + slice.elements;
    for (const ShardEntry& entry : shard.entries) {
      if (entry.offset < end && entry.offset + entry.elements > offset) {
        slice.parameters.push_back(static_cast<size_t>(entry.parameter));
      }
    }
    slices.push_back(std::move(slice));
  }
  return slices;
}

std::vector<SliceRef> PushOrder(const std::vector<std::vector<Slice>>& slices,
                                const std::vector<int>& ready_rank) {
  struct Due {
    int rank;
    SliceRef ref;
  };
  std::vector<Due> due;
  for (size_t s = 0; s < slices.size(); ++s) {
    for (size_t k = 0; k < slices[s].size(); ++k) {
      int rank = -1;
      for (size_t p : slices[s][k].parameters) {
        if (p < ready_rank.size()) rank = std::max(rank, ready_rank[p]);
      }
      due.push_back({rank, {static_cast<int>(s), static_cast<int>(k)}});
    }
  }
  std::stable_sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
    return std::tie(a.rank, a.ref.server, a.ref.slice) <
           std::tie(b.rank, b.ref.server, b.ref.slice);
  });
  std::vector<SliceRef> order;
  for (const Due& d : due) order.push_back(d.ref);
  return order;
}

}  // namespace rdmaflow::strategies::ps
