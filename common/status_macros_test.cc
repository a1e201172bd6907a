#include "common/status_macros.h"

#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd input");
  return x / 2;
}

absl::Status Check(int x) {
  if (x < 0) return absl::OutOfRangeError("negative");
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  RETURN_IF_ERROR(Check(x));
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusMacrosTest, PropagatesErrorsUnchanged) {
  EXPECT_THAT(Quarter(-4), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("odd")));
}

TEST(StatusMacrosTest, AssignsValues) {
  ASSERT_OK_AND_ASSIGN(int q, Quarter(12));
  EXPECT_EQ(q, 3);
  EXPECT_THAT(Quarter(8), IsOk());
}

TEST(StatusMatchersTest, StatusIsRejectsOtherCodes) {
  EXPECT_THAT(Check(-1), ::testing::Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(Check(-1), ::testing::Not(IsOk()));
}

}  // namespace
}  // namespace rdmaflow
