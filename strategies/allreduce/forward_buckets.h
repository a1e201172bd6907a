// File: forward_buckets.h
// -----------------------------------------------------------------------------
// Which bytes of a data-parallel group's buckets the allreduce strategy's
// overlap=forward all-reduces during the next step's forward (deferred),
// and which in their own step, during backward (in step). Only the head's
// buckets (every parameter in the model's head, the part after the split)
// can wait: the next forward reads them last. The first head bucket
// backward completes stays in its step, so the ring has work while
// backward runs on. The budget is then taken from the head buckets
// backward completes last, whole buckets while they fit and then the tail
// of the next one: the buckets backward completes first go in their step
// as soon as they are complete, and the ring's work during backward has no
// gap while a deferred bucket waits out the step.
//
// The budget: forward takes about a third of a step's compute (backward
// about twice its cost), so by default (kAutoBudget) a third of the
// gradients' bytes: on the VGG-like net (4 MiB buckets) 5.8 MB of the
// first fully connected layer's 12.8 MB, while the rest of that layer and
// the second layer's 4.2 MB go during backward. A bucket with a deferred
// part is applied with the deferred ones, in the next forward. Every rank
// computes the same schedule from the same buckets.
#ifndef RDMAFLOW_STRATEGIES_ALLREDUCE_FORWARD_BUCKETS_H_
#define RDMAFLOW_STRATEGIES_ALLREDUCE_FORWARD_BUCKETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/buckets.h"

namespace rdmaflow::strategies {

// Bytes [begin, begin + bytes) of bucket `bucket`, counted from the
// bucket's first byte.
struct BucketPart {
  size_t bucket = 0;
  size_t begin = 0;
  size_t bytes = 0;
  bool operator==(const BucketPart& o) const {
    return bucket == o.bucket && begin == o.begin && bytes == o.bytes;
  }
};

struct ForwardSchedule {
  std::vector<BucketPart> deferred;  // in bucket order
  std::vector<BucketPart> in_step;   // the rest of every bucket, in bucket order
  // Buckets with a deferred part, applied in the next forward, and the
  // others, applied after their step; both in bucket order.
  std::vector<size_t> applied_late;
  std::vector<size_t> applied_in_step;
  int64_t deferred_bytes = 0;
};

inline constexpr int64_t kAutoBudget = -1;
// A bucket's deferred tail is a multiple of this many bytes long (it
// begins wherever that leaves it, on a whole element). However short, it
// costs one more all-reduce call, during the next forward, which the
// features' compute hides.
inline constexpr size_t kDeferredPartAlignment = 64;

// `buckets` (of tensors in the order backward completes them); `head[i]`:
// tensor i is a head parameter (a bucket is the head's when all its
// tensors are). `budget_bytes`: kAutoBudget or >= 0.
ForwardSchedule ScheduleForForward(const std::vector<collectives::Bucket>& buckets,
                                   const std::vector<bool>& head, int64_t budget_bytes);

// The same from tensors (in backward's order, `head[i]` for tensor i),
// laid out and bucketed as a data-parallel group lays out and buckets
// them: what the simulator asks for its model's layers. kInvalidArgument
// for sizes and flags of different counts.
absl::StatusOr<ForwardSchedule> ScheduleTensorsForForward(const std::vector<size_t>& tensor_bytes,
                                                          const std::vector<bool>& head,
                                                          size_t bucket_bytes,
                                                          int64_t budget_bytes);

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_ALLREDUCE_FORWARD_BUCKETS_H_
