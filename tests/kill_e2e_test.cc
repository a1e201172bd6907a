// End to end: one rank of an rdmaflow_train job gets SIGKILL mid-run
// (--kill_rank, which the local launcher does not count as a failure, so
// only the survivors' own liveness checks can end the job). A strategy
// that cannot go on without it (ps in every sync mode, allreduce,
// layer_separated) must fail naming the dead rank as dead, not by waiting
// out its 120 s timeout; gossip and Moshpit keep training
// (strategies_train_e2e_test.cc). Skips without the dataset.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/train_runner.h"

namespace rdmaflow {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using KillE2eTest = testing::TrainE2eTest;

// The survivors' error names the killed rank as gone, and no wait ran out.
void ExpectEndedByLiveness(const std::string& output, int killed) {
  EXPECT_THAT(output, HasSubstr("killing itself before step"));
  EXPECT_THAT(output, HasSubstr(absl::StrCat("peer rank ", killed, " (pid ")));
  EXPECT_THAT(output, HasSubstr("has exited"));
  EXPECT_THAT(output, AllOf(Not(HasSubstr("received no gradient for")),
                            Not(HasSubstr("timed out after")),
                            Not(HasSubstr("DEADLINE_EXCEEDED"))));
}

TEST_F(KillE2eTest, ParameterServerFailsNamingTheDeadWorkerInEverySyncMode) {
  for (const char* sync : {"bsp", "asp", "ssp:3", "dssp:2:6"}) {
    SCOPED_TRACE(sync);
    const std::string output = testing::TrainExpectingFailure(
        absl::StrCat("ps_kill_", sync),
        absl::StrCat("--local 3 --model mlp --strategy ps --sync ", sync,
                     " --steps 400 --kill_rank 2 --kill_step 40"));
    ExpectEndedByLiveness(output, 2);
  }
}

TEST_F(KillE2eTest, AllReduceFailsNamingTheDeadRank) {
  const std::string output = testing::TrainExpectingFailure(
      "allreduce_kill",
      "--local 3 --model mlp --strategy allreduce --steps 400 --kill_rank 2 --kill_step 40");
  EXPECT_THAT(output, HasSubstr("killing itself before step"));
  // The same-host all-reduce learns of the death from the member it waited
  // for, or from the transport: either names a rank and gives up.
  EXPECT_THAT(output, AllOf(Not(HasSubstr("timed out after")),
                            Not(HasSubstr("DEADLINE_EXCEEDED"))));
  EXPECT_THAT(output, HasSubstr("local job: ABORTED"));
}

TEST_F(KillE2eTest, LayerSeparatedFailsNamingTheDeadConvRank) {
  const std::string output = testing::TrainExpectingFailure(
      "layer_separated_kill", "--local 4 --model lenet5 --strategy layer_separated --steps 400 "
                              "--kill_rank 1 --kill_step 30");
  ExpectEndedByLiveness(output, 1);
}

}  // namespace
}  // namespace rdmaflow
