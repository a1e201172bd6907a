// File: trace_recorder.cc
#include "runtime/trace_recorder.h"

#include <string>

#include "results/chrome_trace.pb.h"
#include "results/chrome_trace_rows.h"
#include "results/json.h"

namespace rdmaflow::runtime {
namespace {

constexpr int kLanes = 4;

const char* LaneName(TraceRecorder::Lane lane) {
  switch (lane) {
    case TraceRecorder::Lane::kSend:
      return "send";
    case TraceRecorder::Lane::kRecv:
      return "recv";
    case TraceRecorder::Lane::kPull:
      return "pull";
    case TraceRecorder::Lane::kWait:
      return "slot wait";
  }
  return "?";
}

}  // namespace

void TraceRecorder::Add(Lane lane, const std::string& tensor, absl::Time begin,
                        absl::Time end, int peer, int64_t step,
                        uint64_t bytes) {
  if (!enabled_) return;
  events_.push_back(Event{lane, tensor, absl::ToUnixMicros(begin),
                          absl::ToInt64Microseconds(end - begin), peer, step,
                          bytes});
}

results::ChromeTrace TraceRecorder::Trace() const {
  results::ChromeTrace trace;
  // Name the rows: process = rank, threads = lanes.
  *trace.add_traceevents() =
      results::RowName(rank_, -1, "rank " + std::to_string(rank_));
  for (int lane = 0; lane < kLanes; ++lane) {
    *trace.add_traceevents() =
        results::RowName(rank_, lane, LaneName(static_cast<Lane>(lane)));
  }
  for (const Event& e : events_) {
    results::TraceEvent& event = *trace.add_traceevents();
    event.set_ph("X");
    event.set_name(e.tensor);
    event.set_cat(LaneName(e.lane));
    event.set_pid(rank_);
    event.set_tid(static_cast<int>(e.lane));
    event.set_ts(static_cast<double>(e.begin_us));
    event.set_dur(static_cast<double>(e.duration_us));
    event.mutable_args()->set_peer(e.peer);
    event.mutable_args()->set_step(static_cast<double>(e.step));
    event.mutable_args()->set_bytes(static_cast<double>(e.bytes));
  }
  return trace;
}

absl::StatusOr<std::string> TraceRecorder::ToJson() const {
  return results::ToJson(Trace());
}

absl::Status TraceRecorder::WriteFile(const std::string& path) const {
  return results::WriteJsonFile(Trace(), path);
}

}  // namespace rdmaflow::runtime
