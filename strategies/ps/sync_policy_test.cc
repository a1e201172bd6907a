// The sync paradigms as pure functions: parsing, the bounds each mode sets,
// and DSSP's choice of r on synthetic timings, always inside [LOW, HIGH].
#include "strategies/ps/sync_policy.h"

#include <random>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::strategies::ps {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SyncPolicyTest, ParsesEveryModeAndRejectsNonsense) {
  ASSERT_OK_AND_ASSIGN(SyncPolicy ssp, SyncPolicy::Parse("ssp:3"));
  EXPECT_EQ(ssp.mode, SyncMode::kSsp);
  EXPECT_EQ(ssp.staleness, 3);
  ASSERT_OK_AND_ASSIGN(SyncPolicy dssp, SyncPolicy::Parse("dssp:1:6"));
  EXPECT_EQ(dssp.mode, SyncMode::kDssp);
  EXPECT_EQ(dssp.staleness_high, 6);
  EXPECT_EQ(dssp.ToString(), "dssp:1:6");
  EXPECT_EQ(SyncPolicy::Parse("bsp")->ToString(), "bsp");
  EXPECT_EQ(SyncPolicy::Parse("asp")->mode, SyncMode::kAsp);
  for (const char* bad : {"", "ssp", "ssp:-1", "dssp:5:2", "bsp:1", "hogwild",
                          "dssp:1"}) {
    EXPECT_THAT(SyncPolicy::Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("use bsp, asp, ssp:S")))
        << bad;
  }
}

TEST(SyncPolicyTest, BoundsOfBspSspAndAsp) {
  ClockTable bsp(*SyncPolicy::Parse("bsp"), 2);
  bsp.OnPush(0, 1.0);
  EXPECT_EQ(bsp.Bound(0), 0);  // worker 0 at clock 1 waits for worker 1
  bsp.OnPush(1, 1.5);
  EXPECT_EQ(bsp.Bound(0), 1);
  ClockTable ssp(*SyncPolicy::Parse("ssp:2"), 3);
  for (int i = 0; i < 4; ++i) ssp.OnPush(0, i);
  EXPECT_EQ(ssp.min_clock(), 0);
  EXPECT_EQ(ssp.Bound(0), 2);  // clock 4 - min 0 > 2: it waits
  ClockTable asp(*SyncPolicy::Parse("asp"), 2);
  for (int i = 0; i < 100; ++i) asp.OnPush(0, i);
  EXPECT_EQ(asp.Bound(0), kUnbounded);
}

// Hand-worked cases of the rule: the r whose predicted push lands nearest
// the slowest worker's next push.
TEST(DsspTest, PicksTheIterationsThatMeetTheSlowestWorker) {
  // Fastest pushes every 1 s (last at 10), slowest every 4 s (last at 9):
  // its next push is at 13, three fast iterations away.
  EXPECT_EQ(DsspExtraIterations({10, 1}, {9, 4}, 10, 5), 3);
  // The range caps r.
  EXPECT_EQ(DsspExtraIterations({10, 1}, {9, 4}, 10, 2), 2);
  // The slowest is about to push: no extra iteration helps.
  EXPECT_EQ(DsspExtraIterations({10, 1}, {7, 3.1}, 10, 5), 0);
  // Ties go to the smaller r: next slow push at 11.5, fast at 11 or 12.
  EXPECT_EQ(DsspExtraIterations({10, 1}, {9.5, 2}, 10, 5), 1);
  // A slow push predicted in the past rolls forward by whole intervals:
  // last 2, interval 4 -> 6, 10, 14: the next after now=12 is 14.
  EXPECT_EQ(DsspExtraIterations({12, 1}, {2, 4}, 12, 5), 2);
  // Unknown intervals: no extra iterations.
  EXPECT_EQ(DsspExtraIterations({10, 0}, {9, 4}, 10, 5), 0);
  EXPECT_EQ(DsspExtraIterations({10, 1}, {9, 0}, 10, 5), 0);
}

// A fast and a slow worker with jittered synthetic timings: DSSP's bound
// for the fast one always lies in [min + LOW, min + HIGH], and it does use
// the extra room (a static LOW would have made it wait more).
TEST(DsspTest, BoundsStayWithinLowAndHighUnderRandomTimings) {
  std::mt19937 random(42);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  ClockTable table(*SyncPolicy::Parse("dssp:1:6"), 2);
  double fast_time = 0, slow_time = 0;
  int granted = 0;
  for (int event = 0; event < 2000; ++event) {
    // Whoever may run runs: the fast worker when within its bound.
    const bool fast_may_run = table.clock(0) <= table.Bound(0);
    if (fast_may_run && fast_time <= slow_time) {
      fast_time += 1.0 * jitter(random);
      table.OnPush(0, fast_time);
      granted += table.extra(0) > 0;
    } else {
      slow_time = std::max(slow_time, fast_may_run ? slow_time : fast_time) +
                  3.0 * jitter(random);
      table.OnPush(1, slow_time);
    }
    for (int w = 0; w < 2; ++w) {
      ASSERT_GE(table.Bound(w), table.min_clock() + 1);
      ASSERT_LE(table.Bound(w), table.min_clock() + 6);
      ASSERT_GE(table.extra(w), 0);
      ASSERT_LE(table.extra(w), 5);
    }
  }
  EXPECT_GT(granted, 0);
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
