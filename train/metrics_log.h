// File: metrics_log.h
// -----------------------------------------------------------------------------
// What the harness reports while it trains: a progress bar on a terminal
// (periodic lines otherwise), one CSV row per step, and evaluation points
// (accuracy against training time) for plots.
#ifndef RDMAFLOW_TRAIN_METRICS_LOG_H_
#define RDMAFLOW_TRAIN_METRICS_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace rdmaflow::train {

// One step of one worker. Value type.
struct StepRecord {
  int64_t step = 0;
  double elapsed_s = 0;  // training time so far (evaluations excluded)
  double loss = 0;
  double batch_accuracy = 0;
  double samples_per_s = 0;
  double compute_ms = 0;
  double comm_ms = 0;
  double wait_ms = 0;   // of comm_ms: waiting for slower workers
  int64_t staleness = 0;  // clock - slowest clock seen (-1 unknown)
  double test_accuracy = -1;  // when evaluated at this step
  // Of compute_ms, the time communication ran beside it (the strategy's
  // step timeline, strategies/step_timeline.h).
  double overlap_ms = 0;
};

// CSV writer. Thread-compatible.
class MetricsLog {
 public:
  // kUnavailable naming the path when it cannot be created.
  static absl::StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& path);
  ~MetricsLog();
  void Add(const StepRecord& record);

 private:
  explicit MetricsLog(std::FILE* file) : file_(file) {}
  std::FILE* file_;
};

// Progress on stderr: a redrawn bar when stderr is a terminal, else a line
// every `total / 20` steps. Thread-compatible.
class Progress {
 public:
  Progress(std::string label, int64_t total);
  void Update(int64_t done, const std::string& status);
  void Finish(const std::string& status);

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  int64_t next_line_ = 0;
};

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_METRICS_LOG_H_
