// RunScope: runs and elastic restarts get distinct key prefixes; malformed
// variables are refused by name.
#include "rdma/torch/run_scope.h"

#include <cstdlib>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::torch {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

class RunScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"RDMAFLOW_RUN_ID", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"}) {
      unsetenv(name);
    }
  }
};

TEST_F(RunScopeTest, DefaultsToTorchrunsDefaults) {
  ASSERT_OK_AND_ASSIGN(RunScope scope, RunScope::FromEnvironment());
  EXPECT_EQ(scope.prefix(), "run/none/attempt/0");
}

TEST_F(RunScopeTest, RestartsAndRunsDiffer) {
  setenv("TORCHELASTIC_RUN_ID", "job-7", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  ASSERT_OK_AND_ASSIGN(RunScope first, RunScope::FromEnvironment());
  setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  ASSERT_OK_AND_ASSIGN(RunScope restarted, RunScope::FromEnvironment());
  EXPECT_EQ(first.prefix(), "run/job-7/attempt/0");
  EXPECT_EQ(restarted.prefix(), "run/job-7/attempt/1");
  setenv("RDMAFLOW_RUN_ID", "mine", 1);  // wins over torchrun's
  ASSERT_OK_AND_ASSIGN(RunScope mine, RunScope::FromEnvironment());
  EXPECT_EQ(mine.prefix(), "run/mine/attempt/1");
}

TEST_F(RunScopeTest, MalformedVariablesAreRefusedByName) {
  setenv("TORCHELASTIC_RUN_ID", "a/../b", 1);
  EXPECT_THAT(RunScope::FromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TORCHELASTIC_RUN_ID")));
  setenv("TORCHELASTIC_RUN_ID", "", 1);
  EXPECT_THAT(RunScope::FromEnvironment(), StatusIs(absl::StatusCode::kInvalidArgument));
  setenv("TORCHELASTIC_RUN_ID", std::string(129, 'x').c_str(), 1);
  EXPECT_THAT(RunScope::FromEnvironment(), StatusIs(absl::StatusCode::kInvalidArgument));
  setenv("TORCHELASTIC_RUN_ID", "ok", 1);
  for (const char* count : {"-1", "x", "99999999999999999999", "1000001"}) {
    setenv("TORCHELASTIC_RESTART_COUNT", count, 1);
    EXPECT_THAT(RunScope::FromEnvironment(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("TORCHELASTIC_RESTART_COUNT")))
        << count;
  }
}

}  // namespace
}  // namespace rdmaflow::rdma::torch
