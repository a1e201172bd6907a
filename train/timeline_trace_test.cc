// The step timeline as a Chrome trace: the rank's rows named, one complete
// event per span on its kind's row, at its time and length in microseconds.
#include "train/timeline_trace.h"

#include "gtest/gtest.h"

namespace rdmaflow::train {
namespace {

using strategies::StepSpan;

TEST(TimelineTraceTest, EachSpanIsAnEventOnItsKindsRow) {
  TimelineTrace trace(3, "worker");
  const absl::Time t0 = absl::FromUnixMicros(1'000'000);
  strategies::StepTimeline step;
  step.Add(StepSpan::Kind::kCommunication, t0, t0 + absl::Microseconds(40));
  step.Add(StepSpan::Kind::kWait, t0, t0 + absl::Microseconds(10));
  step.Add(StepSpan::Kind::kCompute, t0 + absl::Microseconds(40), t0 + absl::Microseconds(140));
  trace.Add(7, step);
  const results::ChromeTrace& t = trace.trace();
  // The process row and its three lanes, then the three spans.
  ASSERT_EQ(t.traceevents_size(), 4 + 3);
  EXPECT_EQ(t.traceevents(0).ph(), "M");
  EXPECT_EQ(t.traceevents(0).args().name(), "rank 3 (worker)");
  EXPECT_EQ(t.traceevents(1).args().name(), "compute");
  EXPECT_EQ(t.traceevents(2).args().name(), "communication");
  EXPECT_EQ(t.traceevents(3).args().name(), "wait");
  const results::TraceEvent& compute = t.traceevents(6);
  EXPECT_EQ(compute.ph(), "X");
  EXPECT_EQ(compute.name(), "compute 7");
  EXPECT_EQ(compute.pid(), 3);
  EXPECT_EQ(compute.tid(), t.traceevents(1).tid());
  EXPECT_EQ(compute.ts(), 1'000'040);
  EXPECT_EQ(compute.dur(), 100);
  EXPECT_EQ(compute.args().step(), 7);
  EXPECT_EQ(t.traceevents(5).tid(), t.traceevents(3).tid());  // the wait
}

}  // namespace
}  // namespace rdmaflow::train
