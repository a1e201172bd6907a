// File: compute_load_test.cc
#include "bench/compute_load.h"

#include <chrono>
#include <cstdint>

#include "gtest/gtest.h"

namespace rdmaflow::bench {
namespace {

// Spins until the load's count reaches `at_least` (its thread needs a core
// for some microseconds; the test's timeout bounds a load that never runs).
void WaitForWork(const ComputeLoad& load, uint64_t at_least) {
  while (load.iterations() < at_least) {
  }
}

TEST(ComputeLoadTest, CountsWorkWhileItRuns) {
  ComputeLoad load(1);
  EXPECT_EQ(load.threads(), 1);
  // The count rises while the thread runs, not only once it stops.
  WaitForWork(load, 3 * 4096);
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
  // The measure waits for 8 chunks of the load's work. The rate's window
  // lies inside the whole call (T) and holds the work the measure saw, so
  // the rate is at least that work over T: a rate that is not per second
  // (a raw count, a product) falls below it.
  uint64_t seen_before = 0, seen_after = 0;
  std::chrono::duration<double> inner{0};
  const uint64_t first = load.iterations();
  const auto begin = std::chrono::steady_clock::now();
  const double rate = LoadRate(&load, [&] {
    const auto start = std::chrono::steady_clock::now();
    seen_before = load.iterations();
    WaitForWork(load, seen_before + 8 * 4096);
    seen_after = load.iterations();
    inner = std::chrono::steady_clock::now() - start;
  });
  const std::chrono::duration<double> whole = std::chrono::steady_clock::now() - begin;
  const uint64_t last = load.iterations();
  ASSERT_GE(seen_after - seen_before, 8u * 4096);
  EXPECT_GE(rate, static_cast<double>(seen_after - seen_before) / whole.count());
  // And at most all the work of the call over the measure's own time, which
  // lies inside the rate's window.
  ASSERT_GT(inner.count(), 0);
  EXPECT_LE(rate, static_cast<double>(last - first) / inner.count());
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
