// File: step_timeline.h
// -----------------------------------------------------------------------------
// What one strategy step did when: spans of computing, communicating and
// waiting (for a slower rank, a permission, a reply), which the trainer
// writes into its summary and a Chrome trace per rank (docs/strategies.md)
// so that the overlap of communication with compute can be seen. A wait
// is part of communication: it lies inside a communication span.
//
//   StepTimeline timeline;
//   timeline.Add(StepSpan::Kind::kCommunication, begin, pulled);
//   timeline.Add(StepSpan::Kind::kCompute, pulled, computed);
//   absl::Duration hidden = timeline.Overlap();  // 0: one after the other
#ifndef RDMAFLOW_STRATEGIES_STEP_TIMELINE_H_
#define RDMAFLOW_STRATEGIES_STEP_TIMELINE_H_

#include <vector>

#include "absl/time/time.h"

namespace rdmaflow::strategies {

struct StepSpan {
  enum class Kind { kCompute, kCommunication, kWait };
  Kind kind = Kind::kCompute;
  absl::Time begin;
  absl::Time end;
};

// "compute", "communication", "wait".
const char* KindName(StepSpan::Kind kind);

// The spans of one step, in the order they were added. Value type.
class StepTimeline {
 public:
  // A span that ends before it begins (a clock step back) is kept empty.
  void Add(StepSpan::Kind kind, absl::Time begin, absl::Time end);

  const std::vector<StepSpan>& spans() const { return spans_; }
  // The time covered by spans of `kind` (overlapping spans counted once).
  absl::Duration Covered(StepSpan::Kind kind) const;
  // The time during which the rank computed and communicated at once (a
  // wait counts as communication): what overlap hid.
  absl::Duration Overlap() const;

 private:
  std::vector<StepSpan> spans_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_STEP_TIMELINE_H_
