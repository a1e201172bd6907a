// End to end: rdmaflow_train runs a parameter server job as 3 OS processes
// (1 server, 2 workers) over UCX shared memory, on Fashion-MNIST from
// Debian's dataset-fashion-mnist, and LeNet-5 learns: test accuracy far
// above chance (10 %). Also asp with a straggler (one worker 2x slower).
// Skips when the dataset package is missing.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/train_runner.h"

namespace rdmaflow {
namespace {

using PsTrainE2eTest = testing::TrainE2eTest;

TEST_F(PsTrainE2eTest, LeNetLearnsFashionMnistWithBsp) {
  const double accuracy = testing::TrainAndGetAccuracy(
      "bsp", "--local 3 --model lenet5 --sync bsp --steps 300");
  RecordProperty("test_accuracy", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.70);
}

TEST_F(PsTrainE2eTest, LeNetLearnsWithAspAndAStraggler) {
  const double accuracy =
      testing::TrainAndGetAccuracy("asp", "--local 3 --model lenet5 --sync asp --steps 200 "
                                          "--slow_rank 1 --slow_factor 2");
  RecordProperty("test_accuracy", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.60);
}

}  // namespace
}  // namespace rdmaflow
