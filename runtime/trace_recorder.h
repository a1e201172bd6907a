// File: trace_recorder.h
// -----------------------------------------------------------------------------
// TraceRecorder: collects one event per transfer (send, receive, pull, slot
// wait) and writes them as Chrome trace JSON, the format chrome://tracing and
// Perfetto (ui.perfetto.dev) open. Each rank is a process row, each event
// kind a thread row. The document is a results::ChromeTrace
// (results/chrome_trace.proto) printed by results/json.h.
#ifndef RDMAFLOW_RUNTIME_TRACE_RECORDER_H_
#define RDMAFLOW_RUNTIME_TRACE_RECORDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rdmaflow::results {
class ChromeTrace;
}  // namespace rdmaflow::results

namespace rdmaflow::runtime {

// Thread-compatible. Disabled recorders cost one branch per event.
class TraceRecorder {
 public:
  enum class Lane { kSend = 0, kRecv = 1, kPull = 2, kWait = 3 };

  TraceRecorder(int rank, bool enabled) : rank_(rank), enabled_(enabled) {}

  bool enabled() const { return enabled_; }

  // Records a complete event [begin, end) named after a tensor.
  void Add(Lane lane, const std::string& tensor, absl::Time begin,
           absl::Time end, int peer, int64_t step, uint64_t bytes);

  size_t size() const { return events_.size(); }

  // The JSON document ({"traceEvents": [...]}). kInternal only if protobuf
  // cannot print it.
  absl::StatusOr<std::string> ToJson() const;

  // Writes ToJson() to `path`; kUnavailable naming the path on failure.
  absl::Status WriteFile(const std::string& path) const;

 private:
  // The recorded events as a trace document, rows named.
  results::ChromeTrace Trace() const;

  struct Event {
    Lane lane;
    std::string tensor;
    int64_t begin_us;
    int64_t duration_us;
    int peer;
    int64_t step;
    uint64_t bytes;
  };
  const int rank_;
  const bool enabled_;
  std::vector<Event> events_;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_TRACE_RECORDER_H_
