// File: forward_buckets.h
// -----------------------------------------------------------------------------
// Which of a data-parallel group's buckets the allreduce strategy's
// overlap=forward all-reduces during the next step's forward (deferred),
// and which in their own step, during backward (in step). Only the head's
// buckets (every parameter in the model's head, the part after the split)
// can wait: the next forward reads them last. The first head bucket
// backward completes stays in its step, so the ring has work while
// backward runs on; then, in backward's order, each head bucket is
// deferred while the deferred bytes stay within `budget_bytes`.
//
// The budget: forward takes about a third of a step's compute (backward
// about twice its cost), so by default (kAutoBudget) a third of the
// gradients' bytes: on the VGG-like net (4 MiB buckets) the 4.2 MB of the
// second fully connected layer, while the first's 12.8 MB go during
// backward. Every rank computes the same schedule from the same buckets.
#ifndef RDMAFLOW_STRATEGIES_ALLREDUCE_FORWARD_BUCKETS_H_
#define RDMAFLOW_STRATEGIES_ALLREDUCE_FORWARD_BUCKETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/buckets.h"

namespace rdmaflow::strategies {

struct ForwardSchedule {
  std::vector<size_t> deferred;  // bucket indices, in bucket order
  std::vector<size_t> in_step;   // the others, in bucket order
  int64_t deferred_bytes = 0;
};

inline constexpr int64_t kAutoBudget = -1;

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
