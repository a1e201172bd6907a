// File: timeline_trace.h
// -----------------------------------------------------------------------------
// The trainer's step timeline of one rank as a Chrome trace
// (chrome://tracing, ui.perfetto.dev): a row per kind of span (compute,
// communication, wait) under the rank, an event per span named by its kind
// and step. Communication hidden behind compute shows as events of the
// compute and communication rows side by side (strategies/step_timeline.h).
// rdmaflow_train writes it as <--log_prefix>.rank<R>.timeline.json.
#ifndef RDMAFLOW_TRAIN_TIMELINE_TRACE_H_
#define RDMAFLOW_TRAIN_TIMELINE_TRACE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "results/chrome_trace.pb.h"
#include "strategies/step_timeline.h"

namespace rdmaflow::train {

// Thread-compatible.
class TimelineTrace {
 public:
  // `rank` names the process row; `role` ("worker", "server") goes with it.
  TimelineTrace(int rank, const std::string& role);

  // The spans of the rank's step number `step` (its Step() calls, from 0).
  void Add(int64_t step, const strategies::StepTimeline& timeline);
  const results::ChromeTrace& trace() const { return trace_; }
  // kUnavailable naming `path` when it cannot be written.
  absl::Status WriteFile(const std::string& path) const;

 private:
  const int rank_;
  results::ChromeTrace trace_;
};

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_TIMELINE_TRACE_H_
