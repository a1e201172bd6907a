// File: compute_load_test.cc
#include "bench/compute_load.h"

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rdmaflow::bench {
namespace {

// Whether the load's count reaches `at_least` within a generous deadline
// (its thread needs a core for a few microseconds).
bool ReachesWithin(const ComputeLoad& load, uint64_t at_least) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (load.iterations() < at_least) {
    if (absl::Now() > deadline) return false;
  }
  return true;
}

TEST(ComputeLoadTest, CountsWorkWhileItRuns) {
  ComputeLoad load(1);
  EXPECT_EQ(load.threads(), 1);
  // The count rises while the thread runs, not only once it stops.
  ASSERT_TRUE(ReachesWithin(load, 3 * 4096));
  const uint64_t running = load.iterations();
  EXPECT_EQ(running % 4096, 0u);
  load.Stop();
  const uint64_t stopped = load.iterations();
  EXPECT_GE(stopped, running);
  load.Stop();  // idempotent
  EXPECT_EQ(load.iterations(), stopped);
}

TEST(ComputeLoadTest, RateIsTheWorkDoneWhileTheMeasureRan) {
  ComputeLoad load(1);
  // The measure waits for the load's own work: the rate is positive, and
  // the work it saw is what the counter moved by.
  uint64_t seen_before = 0, seen_after = 0;
  bool reached = false;
  const double rate = LoadRate(&load, [&] {
    seen_before = load.iterations();
    reached = ReachesWithin(load, seen_before + 2 * 4096);
    seen_after = load.iterations();
  });
  ASSERT_TRUE(reached);
  EXPECT_GT(rate, 0);
  EXPECT_GE(seen_after - seen_before, 2u * 4096);
}

TEST(ComputeLoadTest, NoLoadHasNoRateButStillRunsTheMeasure) {
  ComputeLoad none(0);
  EXPECT_EQ(none.threads(), 0);
  int ran = 0;
  EXPECT_EQ(LoadRate(&none, [&] { ++ran; }), 0);
  EXPECT_EQ(LoadRate(nullptr, [&] { ++ran; }), 0);
  EXPECT_EQ(ran, 2);
}

}  // namespace
}  // namespace rdmaflow::bench
