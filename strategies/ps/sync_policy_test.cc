// The sync paradigms as pure functions: parsing, the bounds each mode sets,
// and DSSP's choice of r on synthetic timings, always inside [LOW, HIGH].
#include "strategies/ps/sync_policy.h"

#include <functional>
#include <limits>
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
// A slice's row as a worker reads it from its server: read-my-writes,
// bsp's exact step, the bound otherwise, and forged rows refused.
TEST(SlicePermittedTest, FollowsTheModeAndRefusesForgedRows) {
  // Worker 1 at clock 3.
  EXPECT_THAT(SlicePermitted({3, 3, 3}, 1, 3, SyncMode::kBsp, 0), ::rdmaflow::testing::IsOkAndHolds(true));
  EXPECT_THAT(SlicePermitted({2, 3, 3}, 1, 3, SyncMode::kBsp, 9), ::rdmaflow::testing::IsOkAndHolds(false));
  EXPECT_THAT(SlicePermitted({9, 2, 9}, 1, 3, SyncMode::kAsp, kUnbounded),
              ::rdmaflow::testing::IsOkAndHolds(false));  // its own last gradient not in yet
  EXPECT_THAT(SlicePermitted({0, 3, 1}, 1, 3, SyncMode::kSsp, 3), ::rdmaflow::testing::IsOkAndHolds(true));
  EXPECT_THAT(SlicePermitted({0, 3, 1}, 1, 3, SyncMode::kSsp, 2), ::rdmaflow::testing::IsOkAndHolds(false));
  // Before the server started: -1 everywhere.
  EXPECT_THAT(SlicePermitted({-1, -1, -1}, 1, 0, SyncMode::kBsp, -1), ::rdmaflow::testing::IsOkAndHolds(false));
  // Forged: more of the worker's gradients than it pushed, at any size.
  for (int64_t forged : {int64_t{4}, std::numeric_limits<int64_t>::max()}) {
    EXPECT_THAT(SlicePermitted({3, forged, 3}, 1, 3, SyncMode::kAsp, kUnbounded),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than the worker pushed")));
  }
  EXPECT_THAT(SlicePermitted({3, 3}, 2, 3, SyncMode::kBsp, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

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

// Two workers run against a table as the server's bounds let them: worker 0
// computes in ~1 s, worker 1 in ~`slow` s (both jittered +-20 %). A worker
// starts a step as soon as its clock is within its bound. Returns worker
// 0's mean lead in clocks (sampled at every push) and the grants it got;
// `check` runs after every push.
struct Race {
  double mean_lead = 0;
  int grants = 0;
};
Race RunRace(const SyncPolicy& policy, double slow, int pushes,
             const std::function<void(const ClockTable&)>& check) {
  std::mt19937 random(42);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  ClockTable table(policy, 2);
  const double pace[2] = {1.0, slow};
  double done[2] = {pace[0] * jitter(random), pace[1] * jitter(random)};
  double waiting_since[2] = {-1, -1};
  Race race;
  for (int push = 0; push < pushes; ++push) {
    const int w = (waiting_since[1] >= 0 || (waiting_since[0] < 0 && done[0] <= done[1])) ? 0 : 1;
    const double now = done[w];
    table.OnPush(w, now);
    check(table);
    race.mean_lead += static_cast<double>(table.clock(0) - table.clock(1)) / pushes;
    race.grants += w == 0 && table.extra(0) > 0 && table.clock(0) == table.min_clock() + 2;
    waiting_since[w] = now;
    for (int v = 0; v < 2; ++v) {
      if (waiting_since[v] < 0 || table.clock(v) > table.Bound(v)) continue;
      waiting_since[v] = -1;
      done[v] = now + pace[v] * jitter(random);
    }
  }
  return race;
}

// DSSP's bound always lies in [min + LOW, min + HIGH]; the interval it
// knows of the fast worker is an iteration's time (0.8-1.2 s), never its
// wait; it grants extra iterations against a 3x straggler, so the fast
// worker leads by more than under ssp:LOW (which, while the intervals held
// the wait, DSSP equalled) and by no more than under ssp:HIGH.
TEST(DsspTest, GrantsAgainstAStragglerWithinLowAndHigh) {
  const Race dssp = RunRace(*SyncPolicy::Parse("dssp:1:6"), 3.0, 2000,
                            [](const ClockTable& table) {
                              for (int w = 0; w < 2; ++w) {
                                ASSERT_GE(table.Bound(w), table.min_clock() + 1);
                                ASSERT_LE(table.Bound(w), table.min_clock() + 6);
                                ASSERT_GE(table.extra(w), 0);
                                ASSERT_LE(table.extra(w), 5);
                              }
                              if (table.timing(0).interval > 0) {
                                ASSERT_GE(table.timing(0).interval, 0.8 - 1e-9);
                                ASSERT_LE(table.timing(0).interval, 1.2 + 1e-9);
                              }
                            });
  const Race low = RunRace(*SyncPolicy::Parse("ssp:1"), 3.0, 2000, [](const ClockTable&) {});
  const Race high = RunRace(*SyncPolicy::Parse("ssp:6"), 3.0, 2000, [](const ClockTable&) {});
  EXPECT_GT(dssp.grants, 100);
  EXPECT_GT(dssp.mean_lead, low.mean_lead + 0.5);
  EXPECT_LT(dssp.mean_lead, high.mean_lead);
}

// Worked by hand (dssp:0:4): the fast worker's interval leaves its wait
// out; its grant meets the slowest's next push; a spent grant makes it wait
// until the lower bound covers it, with no new choice in between.
TEST(DsspTest, AGrantMeetsTheSlowestAndIsSpentBeforeTheNext) {
  ClockTable table(*SyncPolicy::Parse("dssp:0:4"), 2);
  table.OnPush(0, 0.9);  // clock 1, min 0: the edge, intervals unknown: r 0
  EXPECT_EQ(table.Bound(0), 0);
  table.OnPush(1, 1);  // min 1: releases the fast worker at 1
  table.OnPush(0, 2);  // clock 2: the edge again; the slowest's interval unknown
  EXPECT_DOUBLE_EQ(table.timing(0).interval, 1.0);
  EXPECT_EQ(table.Bound(0), 1);
  table.OnPush(1, 5);  // interval 4; releases the fast worker at 5
  table.OnPush(0, 6);  // interval 1 (not 4: it waited 3 s); edge at clock 3
  EXPECT_DOUBLE_EQ(table.timing(0).interval, 1.0);
  // The slowest's next push is at 9, three fast iterations from 6.
  EXPECT_EQ(table.extra(0), 3);
  EXPECT_EQ(table.Bound(0), 5);
  for (double t : {7.0, 8.0, 9.0}) table.OnPush(0, t);  // spends it: clock 6
  EXPECT_EQ(table.Bound(0), 5);
  table.OnPush(1, 9.2);  // min 3: the bound is still the grant; it waits
  EXPECT_EQ(table.Bound(0), 5);
  EXPECT_GT(table.clock(0), table.Bound(0));
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
