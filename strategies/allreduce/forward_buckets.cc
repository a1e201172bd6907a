// File: forward_buckets.cc
#include "strategies/allreduce/forward_buckets.h"

namespace rdmaflow::strategies {

ForwardSchedule ScheduleForForward(const std::vector<collectives::Bucket>& buckets,
                                   const std::vector<bool>& head, int64_t budget_bytes) {
  int64_t total = 0;
  for (const collectives::Bucket& bucket : buckets) total += static_cast<int64_t>(bucket.bytes);
  const int64_t budget = budget_bytes == kAutoBudget ? total / 3 : budget_bytes;
  ForwardSchedule schedule;
  bool first_head = true;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const bool is_head = b < head.size() && head[b];
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

}  // namespace rdmaflow::strategies
