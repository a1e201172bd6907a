// File: forward_buckets.cc
#include "strategies/allreduce/forward_buckets.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies {

ForwardSchedule ScheduleForForward(const std::vector<collectives::Bucket>& buckets,
                                   const std::vector<bool>& head, int64_t budget_bytes) {
  int64_t total = 0;
  for (const collectives::Bucket& bucket : buckets) total += static_cast<int64_t>(bucket.bytes);
  const int64_t budget = budget_bytes == kAutoBudget ? total / 3 : budget_bytes;
  std::vector<size_t> heads;  // the head's buckets, in bucket order
  for (size_t b = 0; b < buckets.size(); ++b) {
    bool is_head = buckets[b].end > buckets[b].first;
    for (size_t i = buckets[b].first; i < buckets[b].end && is_head; ++i) {
      is_head = i < head.size() && head[i];
    }
    if (is_head) heads.push_back(b);
  }
  // The deferred tail of each bucket, taken from the last head bucket back
  // to the second (the first stays in its step): whole buckets while they
  // fit, then what is left of the budget from the next one.
  std::vector<size_t> tail(buckets.size(), 0);
  int64_t left = std::max<int64_t>(budget, 0);
  for (size_t h = heads.size(); h-- > 1;) {
    const size_t b = heads[h];
    const int64_t bytes = static_cast<int64_t>(buckets[b].bytes);
    if (bytes <= left) {
      tail[b] = buckets[b].bytes;
      left -= bytes;
      continue;
    }
    tail[b] = static_cast<size_t>(left) / kDeferredPartAlignment * kDeferredPartAlignment;
    break;
  }
  ForwardSchedule schedule;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const size_t bytes = buckets[b].bytes;
    if (tail[b] < bytes) schedule.in_step.push_back({b, 0, bytes - tail[b]});
    if (tail[b] > 0) {
      schedule.deferred.push_back({b, bytes - tail[b], tail[b]});
      schedule.deferred_bytes += static_cast<int64_t>(tail[b]);
      schedule.applied_late.push_back(b);
    } else {
      schedule.applied_in_step.push_back(b);
    }
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
