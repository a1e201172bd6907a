// End to end: rdmaflow_train runs the layer-separated strategy (Stanza) as
// OS processes over UCX shared memory on Fashion-MNIST: the VGG-like net
// with 2 conv ranks and 1 FC rank learns far above chance (10 %), and a
// straggler holds the job back. Skips without the dataset.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/train_runner.h"

namespace rdmaflow {
namespace {

using LayerSeparatedTrainE2eTest = testing::TrainE2eTest;

TEST_F(LayerSeparatedTrainE2eTest, TrainsTheVggLikeNet) {
  const double accuracy = testing::TrainAndGetAccuracy(
      "layer_separated",
      "--local 3 --model vgg --strategy layer_separated --strategy_params fc_ranks=1 "
      "--steps 40 --batch_size 32");
  RecordProperty("test_accuracy", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.40);
}

TEST_F(LayerSeparatedTrainE2eTest, AStragglerHoldsTheJobBack) {
  // layer_separated runs the model itself (no compute callback): the
  // straggler sleeps after its step instead. Conv rank 1 at 50x its compute
  // holds conv rank 0 (the reporter) at the FC rank and in the conv ranks'
  // all-reduce: nearly all of rank 0's step is then communication (which
  // counts the waits).
  testing::TrainRun run = testing::Train(
      "layer_separated_slow",
      "--local 3 --model lenet5 --strategy layer_separated --strategy_params fc_ranks=1 "
      "--steps 20 --slow_rank 1 --slow_factor 50");
  ASSERT_GT(run.summary.mean_step_ms(), 0) << run.output;
  const double held = run.summary.mean_comm_ms() / run.summary.mean_step_ms();
  RecordProperty("comm_fraction", absl::StrCat(held));
  EXPECT_GT(held, 0.9) << run.output;
}

}  // namespace
}  // namespace rdmaflow
