// The ablation's run length: the steps a minimum time needs, within the
// flag's count and 100 times it, and the check of rank 0's published count
// against forged values.
#include "bench/run_length.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace rdmaflow::bench {
namespace {

using ::rdmaflow::testing::StatusIs;

TEST(RunLengthTest, StepsFillTheMinimumTimeWithinTheBounds) {
  EXPECT_NEAR(StepsFor(200, 0.2, absl::Microseconds(16)), 12500, 1);  // 0.2 s / 16 us
  EXPECT_EQ(StepsFor(200, 0.2, absl::Milliseconds(40)), 200);  // --steps already longer
  EXPECT_EQ(StepsFor(200, 0.2, absl::Nanoseconds(100)), 20000);  // at most 100x
  EXPECT_EQ(StepsFor(200, 0, absl::Microseconds(1)), 200);
  EXPECT_EQ(StepsFor(200, 0.2, absl::ZeroDuration()), 20000);  // a clock that did not move
  EXPECT_EQ(StepsFor(2000000000, 10, absl::Nanoseconds(1)), 2147483647);
}

TEST(RunLengthTest, AForgedCountIsRefusedNamingTheKey) {
  EXPECT_EQ(*ParseAgreedSteps("k", "12500", 200), 12500);
  EXPECT_EQ(*ParseAgreedSteps("k", "200", 200), 200);
  EXPECT_EQ(*ParseAgreedSteps("k", "20000", 200), 20000);
  for (const std::string& forged : std::vector<std::string>{"", "abc", "199", "20001", "-5", "12500x", "1e4",
                                   "99999999999999999999", std::string("12\0", 3)}) {
    EXPECT_THAT(ParseAgreedSteps("ablation/steps", forged, 200).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::HasSubstr("rank 0's step count in the store (ablation/steps)")))
        << forged;
  }
}

}  // namespace
}  // namespace rdmaflow::bench
