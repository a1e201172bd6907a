// File: timeline_trace.cc
#include "train/timeline_trace.h"

#include "absl/strings/str_cat.h"
#include "results/chrome_trace_rows.h"
#include "results/json.h"

namespace rdmaflow::train {

using strategies::StepSpan;

TimelineTrace::TimelineTrace(int rank, const std::string& role) : rank_(rank) {
  *trace_.add_traceevents() = results::RowName(rank, -1, absl::StrCat("rank ", rank, " (", role, ")"));
  for (StepSpan::Kind kind :
       {StepSpan::Kind::kCompute, StepSpan::Kind::kCommunication, StepSpan::Kind::kWait}) {
    *trace_.add_traceevents() =
        results::RowName(rank, static_cast<int>(kind), strategies::KindName(kind));
  }
}

void TimelineTrace::Add(int64_t step, const strategies::StepTimeline& timeline) {
  for (const StepSpan& span : timeline.spans()) {
    results::TraceEvent& event = *trace_.add_traceevents();
    event.set_ph("X");
    event.set_name(absl::StrCat(strategies::KindName(span.kind), " ", step));
    event.set_cat(strategies::KindName(span.kind));
    event.set_pid(rank_);
    event.set_tid(static_cast<int>(span.kind));
    event.set_ts(static_cast<double>(absl::ToUnixMicros(span.begin)));
    event.set_dur(absl::ToDoubleMicroseconds(span.end - span.begin));
    event.mutable_args()->set_step(static_cast<double>(step));
  }
}

absl::Status TimelineTrace::WriteFile(const std::string& path) const {
  return results::WriteJsonFile(trace_, path);
}

}  // namespace rdmaflow::train
