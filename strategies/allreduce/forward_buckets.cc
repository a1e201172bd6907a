// File: forward_buckets.cc
#include "strategies/allreduce/forward_buckets.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies {

ForwardSchedule ScheduleForForward(const std::vector<collectives::Bucket>& buckets,
                                   const std::vector<bool>& head, int64_t budget_bytes) {
  int64_t total = 0;
  for (const collectives::Bucket& bucket : buckets) total += static_cast<int64_t>(bucket.bytes);
  const int64_t budget = budget_bytes == kAutoBudget ? total / 3 : budget_bytes;
  ForwardSchedule schedule;
  bool first_head = true;
  for (size_t b = 0; b < buckets.size(); ++b) {
    bool is_head = buckets[b].end > buckets[b].first;
    for (size_t i = buckets[b].first; i < buckets[b].end && is_head; ++i) {
      is_head = i < head.size() && head[i];
    }
    const int64_t bytes = static_cast<int64_t>(buckets[b].bytes);
    if (is_head && !first_head && bytes <= budget - schedule.deferred_bytes) {
      schedule.deferred.push_back(b);
      schedule.deferred_bytes += bytes;
    } else {
      schedule.in_step.push_back(b);
    }
    if (is_head) first_head = false;
  }
  return schedule;
}

absl::StatusOr<ForwardSchedule> ScheduleTensorsForForward(const std::vector<size_t>& tensor_bytes,
                                                          const std::vector<bool>& head,
                                                          size_t bucket_bytes,
                                                          int64_t budget_bytes) {
  if (head.size() != tensor_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("forward schedule: ", tensor_bytes.size(),
                                                   " tensors, ", head.size(), " head flags"));
  }
  ASSIGN_OR_RETURN(const collectives::FusedLayout layout,
                   collectives::LayOut(tensor_bytes, collectives::kFusionAlignment));
  ASSIGN_OR_RETURN(const std::vector<collectives::Bucket> buckets,
                   collectives::MakeBuckets(tensor_bytes, layout, bucket_bytes));
  return ScheduleForForward(buckets, head, budget_bytes);
}

}  // namespace rdmaflow::strategies
