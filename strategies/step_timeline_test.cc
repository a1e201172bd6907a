// The step timeline's arithmetic: covered time counts overlapping spans of
// a kind once, and the overlap is exactly the time computing and
// communicating (or waiting) coincide.
#include "strategies/step_timeline.h"

#include "gtest/gtest.h"

namespace rdmaflow::strategies {
namespace {

using Kind = StepSpan::Kind;

absl::Time At(int64_t ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

TEST(StepTimelineTest, SpansOneAfterTheOtherDoNotOverlap) {
  StepTimeline t;
  t.Add(Kind::kCommunication, At(0), At(10));
  t.Add(Kind::kWait, At(0), At(4));
  t.Add(Kind::kCompute, At(10), At(30));
  t.Add(Kind::kCommunication, At(30), At(35));
  EXPECT_EQ(t.Covered(Kind::kCompute), absl::Milliseconds(20));
  EXPECT_EQ(t.Covered(Kind::kCommunication), absl::Milliseconds(15));
  EXPECT_EQ(t.Covered(Kind::kWait), absl::Milliseconds(4));
  EXPECT_EQ(t.Overlap(), absl::ZeroDuration());
  ASSERT_EQ(t.spans().size(), 4u);
  EXPECT_EQ(t.spans()[1].kind, Kind::kWait);
}

TEST(StepTimelineTest, OverlapCountsEachMomentOnce) {
  StepTimeline t;
  t.Add(Kind::kCompute, At(0), At(20));
  t.Add(Kind::kCompute, At(15), At(40));  // overlaps the first: 0..40
  // Buckets all-reduced during backward: 10..25 and 22..30 (one moment
  // covered by both), then a wait 35..50 partly beside compute.
  t.Add(Kind::kCommunication, At(10), At(25));
  t.Add(Kind::kCommunication, At(22), At(30));
  t.Add(Kind::kWait, At(35), At(50));
  EXPECT_EQ(t.Covered(Kind::kCompute), absl::Milliseconds(40));
  EXPECT_EQ(t.Covered(Kind::kCommunication), absl::Milliseconds(20));
  // 10..30 and 35..40.
  EXPECT_EQ(t.Overlap(), absl::Milliseconds(25));
}

TEST(StepTimelineTest, ASpanEndingBeforeItBeginsIsEmpty) {
  StepTimeline t;
  t.Add(Kind::kCompute, At(10), At(5));
  t.Add(Kind::kCommunication, At(0), At(20));
  EXPECT_EQ(t.Covered(Kind::kCompute), absl::ZeroDuration());
  EXPECT_EQ(t.Overlap(), absl::ZeroDuration());
  EXPECT_EQ(t.spans()[0].end, At(10));
}

TEST(StepTimelineTest, AnEmptyTimelineAndSpansEndingTogether) {
  StepTimeline empty;
  EXPECT_EQ(empty.Covered(Kind::kCompute), absl::ZeroDuration());
  EXPECT_EQ(empty.Overlap(), absl::ZeroDuration());
  StepTimeline t;
  t.Add(Kind::kCompute, At(0), At(10));
  t.Add(Kind::kCompute, At(10), At(20));  // touching: 0..20
  t.Add(Kind::kCommunication, At(5), At(20));
  t.Add(Kind::kWait, At(15), At(20));  // inside the communication
  EXPECT_EQ(t.Covered(Kind::kCompute), absl::Milliseconds(20));
  EXPECT_EQ(t.Overlap(), absl::Milliseconds(15));
}

TEST(StepTimelineTest, KindsHaveNames) {
  EXPECT_STREQ(KindName(Kind::kCompute), "compute");
  EXPECT_STREQ(KindName(Kind::kCommunication), "communication");
  EXPECT_STREQ(KindName(Kind::kWait), "wait");
}

}  // namespace
}  // namespace rdmaflow::strategies
