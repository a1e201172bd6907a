// File: yield_gate_test.cc
#include "onesided/progress/yield_gate.h"

#include "gtest/gtest.h"

namespace rdmaflow::onesided {
namespace {

constexpr absl::Duration kQuick = absl::Microseconds(5);
constexpr absl::Duration kSlow = absl::Milliseconds(3);

TEST(YieldGateTest, QuickYieldsKeepItOpen) {
  YieldGate gate;
  for (uint64_t wait = 0; wait < 100; ++wait) {
    ASSERT_TRUE(gate.Open(wait));
    gate.Yielded(wait, kQuick);
    gate.Yielded(wait, YieldGateOptions().slow);  // the threshold is still quick
  }
  EXPECT_EQ(gate.yields(), 200);
  EXPECT_EQ(gate.slow_yields(), 0);
}

TEST(YieldGateTest, ASlowYieldClosesItForTheNextWaitsDoublingUpToTheMost) {
  YieldGateOptions options;
  options.first_backoff = 4;
  options.max_backoff = 16;
  options.quick_to_halve = 4;
  YieldGate gate(options);
  uint64_t wait = 10;
  // Each slow yield closes it for 4, 8, 16, 16 waits.
  for (int64_t expected : {4, 8, 16, 16}) {
    ASSERT_TRUE(gate.Open(wait));
    gate.Yielded(wait, kSlow);
    for (int64_t k = 1; k <= expected; ++k) {
      EXPECT_FALSE(gate.Open(wait + static_cast<uint64_t>(k))) << "wait " << wait + k;
    }
    wait += static_cast<uint64_t>(expected) + 1;
    EXPECT_TRUE(gate.Open(wait));
  }
  EXPECT_EQ(gate.slow_yields(), 4);
  // Fewer than 4 quick yields in a row change nothing: the next slow one
  // still closes it for 16.
  for (int k = 0; k < 3; ++k) gate.Yielded(wait, kQuick);
  gate.Yielded(wait, kSlow);
  EXPECT_FALSE(gate.Open(wait + 16));
  wait += 17;
  // 4 in a row halve the backoff (16 -> 8: the next slow one doubles it
  // back to 16); 12 in a row halve it three times (16 -> 2), below the
  // first, so the next slow one closes it for 4.
  for (int k = 0; k < 4; ++k) gate.Yielded(wait, kQuick);
  gate.Yielded(wait, kSlow);
  EXPECT_FALSE(gate.Open(wait + 16));
  EXPECT_TRUE(gate.Open(wait + 17));
  wait += 17;
  for (int k = 0; k < 12; ++k) gate.Yielded(wait, kQuick);
  gate.Yielded(wait, kSlow);
  EXPECT_FALSE(gate.Open(wait + 4));
  EXPECT_TRUE(gate.Open(wait + 5));
}

}  // namespace
}  // namespace rdmaflow::onesided
