// File: buckets.h
// -----------------------------------------------------------------------------
// Gradient fusion: lays tensors out back to back (aligned) in one region and
// groups consecutive ones into buckets of about `bucket_bytes`, so that many
// small gradients share one all-reduce instead of each paying a round of
// latency. A tensor larger than a bucket gets a bucket of its own.
#ifndef RDMAFLOW_COLLECTIVES_BUCKETS_H_
#define RDMAFLOW_COLLECTIVES_BUCKETS_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"

namespace rdmaflow::collectives {

// The alignment of each tensor in a data-parallel group's fused region
// (strategies/data_parallel.h): a cache line.
inline constexpr size_t kFusionAlignment = 64;

// Where each tensor lives in the fused region, and the region's size.
struct FusedLayout {
  std::vector<size_t> offsets;  // bytes, one per tensor, in input order
  size_t total_bytes = 0;       // rounded up to `alignment`
};

// Tensors [first, end) occupy bytes [offset, offset + bytes) of the region
// (padding between them included).
struct Bucket {
  size_t first = 0;
  size_t end = 0;
  size_t offset = 0;
  size_t bytes = 0;
};

// kInvalidArgument for an alignment that is not a power of two.
absl::StatusOr<FusedLayout> LayOut(const std::vector<size_t>& tensor_bytes,
                                   size_t alignment);

// Buckets in tensor order covering every tensor exactly once. bucket_bytes
// 0 means one bucket for everything. kInvalidArgument if `layout` does not
// match `tensor_bytes`.
absl::StatusOr<std::vector<Bucket>> MakeBuckets(
    const std::vector<size_t>& tensor_bytes, const FusedLayout& layout,
    size_t bucket_bytes);

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_BUCKETS_H_
