// File: step_timeline.cc
#include "strategies/step_timeline.h"

#include <algorithm>
#include <utility>

namespace rdmaflow::strategies {
namespace {

using Interval = std::pair<absl::Time, absl::Time>;

// The union of the spans `take` accepts, as sorted disjoint intervals.
template <typename Take>
std::vector<Interval> UnionOf(const std::vector<StepSpan>& spans, Take take) {
  std::vector<Interval> in;
  for (const StepSpan& span : spans) {
    if (take(span.kind) && span.end > span.begin) in.emplace_back(span.begin, span.end);
  }
  std::sort(in.begin(), in.end());
  std::vector<Interval> merged;
  for (const Interval& interval : in) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

absl::Duration LengthOf(const std::vector<Interval>& intervals) {
  absl::Duration total;
  for (const Interval& interval : intervals) total += interval.second - interval.first;
  return total;
}

}  // namespace

const char* KindName(StepSpan::Kind kind) {
  switch (kind) {
    case StepSpan::Kind::kCompute:
      return "compute";
    case StepSpan::Kind::kCommunication:
      return "communication";
    case StepSpan::Kind::kWait:
      return "wait";
  }
  return "?";
}

void StepTimeline::Add(StepSpan::Kind kind, absl::Time begin, absl::Time end) {
  spans_.push_back({kind, begin, std::max(begin, end)});
}

absl::Duration StepTimeline::Covered(StepSpan::Kind kind) const {
  return LengthOf(UnionOf(spans_, [kind](StepSpan::Kind k) { return k == kind; }));
}

absl::Duration StepTimeline::Overlap() const {
  const std::vector<Interval> compute =
      UnionOf(spans_, [](StepSpan::Kind k) { return k == StepSpan::Kind::kCompute; });
  const std::vector<Interval> comm =
      UnionOf(spans_, [](StepSpan::Kind k) { return k != StepSpan::Kind::kCompute; });
  // Both lists are sorted and disjoint: one sweep.
  absl::Duration both;
  size_t i = 0, j = 0;
  while (i < compute.size() && j < comm.size()) {
    const absl::Time begin = std::max(compute[i].first, comm[j].first);
    const absl::Time end = std::min(compute[i].second, comm[j].second);
    if (end > begin) both += end - begin;
    if (compute[i].second < comm[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return both;
}

}  // namespace rdmaflow::strategies
