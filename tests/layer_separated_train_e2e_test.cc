// End to end: rdmaflow_train runs the layer-separated strategy (Stanza) as
// OS processes over UCX shared memory on Fashion-MNIST: the VGG-like net
// with 2 conv ranks and 1 FC rank learns far above chance (10 %), and a
// straggler holds the job back; --eval_every evaluates it mid-run without
// changing its training; --device mirror trains as the host does. Skips
// without the dataset.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

void ExpectEvaluatedMidRun(const std::string& overlap) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr) << "run under bazel test";
  const std::string prefix = absl::StrCat(tmp, "/ls_eval_", overlap);
  const std::string flags = absl::StrCat(
      "--local 3 --model lenet5 --strategy layer_separated --strategy_params fc_ranks=1,overlap=",
      overlap, " --steps 20 --seed 5");
  const testing::TrainRun plain = testing::Train(absl::StrCat("ls_plain_", overlap), flags);
  const testing::TrainRun evaluated = testing::Train(
      absl::StrCat("ls_eval_", overlap),
      absl::StrCat(flags, " --eval_every 5 --eval_samples 0 --log_prefix ", prefix));
  ASSERT_GT(plain.summary.final_loss(), 0) << plain.output;
  EXPECT_EQ(evaluated.summary.final_loss(), plain.summary.final_loss()) << evaluated.output;
  EXPECT_EQ(evaluated.summary.test_accuracy(), plain.summary.test_accuracy());
  std::ifstream csv(absl::StrCat(prefix, ".rank0.csv"));
  ASSERT_TRUE(csv.good()) << evaluated.output;
  std::string line;
  std::getline(csv, line);  // the header
  std::vector<int> evaluated_steps;
  double last = -1;
  while (std::getline(csv, line)) {
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    ASSERT_EQ(fields.size(), 11u) << line;
    if (fields[9].empty()) continue;
    evaluated_steps.push_back(std::stoi(fields[0]));
    last = std::stod(fields[9]);
  }
  EXPECT_EQ(evaluated_steps, (std::vector<int>{4, 9, 14, 19}));
  // Every test image, as the final evaluation (the log prints 4 digits).
  EXPECT_GT(plain.summary.test_accuracy(), 0.2);  // chance is 0.1
  EXPECT_NEAR(last, plain.summary.test_accuracy(), 1e-4);
}

// --eval_every on a strategy whose ranks each hold half the model: the
// reporter's log has a test accuracy at every 5th step, the last one that
// of the final model (the reporter's own half alone, with the head it
// started with, scores near chance), and the run ends exactly where one
// without evaluations does.
// With and without the pipeline (where the sharing runs while the next
// batch's activations are on their way).
TEST_F(LayerSeparatedTrainE2eTest, EvaluatesMidRunWithoutChangingTheTraining) {
  for (const std::string overlap : {"off", "on"}) {
    SCOPED_TRACE("overlap=" + overlap);
    ExpectEvaluatedMidRun(overlap);
  }
}

// --device mirror runs each rank's features and head on a copy of the
// model (the --device cuda path, on the CPU; train:device_model_test checks
// the split's gradients): the same steps as on the model itself, so the
// same loss and accuracy, with and without the pipeline (where the host's
// values change while a backward is still due): on the copy's own
// parameters (resident: the groups' regions the fake device's) and staged
// through the host's (--stage_device_parameters).
TEST_F(LayerSeparatedTrainE2eTest, TheDevicePathTrainsAsTheHostDoes) {
  for (const std::string overlap : {"off", "on"}) {
    SCOPED_TRACE("overlap=" + overlap);
    const std::string flags = absl::StrCat(
        "--local 3 --model lenet5 --strategy layer_separated "
        "--strategy_params fc_ranks=1,overlap=",
        overlap, " --steps 20 --seed 3");
    const testing::TrainRun host = testing::Train(absl::StrCat("ls_cpu_", overlap), flags);
    ASSERT_GT(host.summary.final_loss(), 0) << host.output;
    EXPECT_FALSE(host.summary.device_resident());
    for (const bool staged : {false, true}) {
      SCOPED_TRACE(staged ? "staged" : "resident");
      const testing::TrainRun mirror = testing::Train(
          absl::StrCat("ls_mirror_", overlap, staged ? "_staged" : ""),
          absl::StrCat(flags, " --device mirror", staged ? " --stage_device_parameters" : ""));
      EXPECT_NEAR(mirror.summary.final_loss(), host.summary.final_loss(), 1e-5) << mirror.output;
      EXPECT_NEAR(mirror.summary.test_accuracy(), host.summary.test_accuracy(), 1e-9);
      EXPECT_EQ(mirror.summary.device_resident(), !staged);
      // Resident, each conv rank's activations, labels and the
      // activations' gradients land in device slots (the loss does not).
      EXPECT_EQ(mirror.summary.plan_device_transfers(), staged ? 0 : 2 * 3) << mirror.output;
    }
  }
}

}  // namespace
}  // namespace rdmaflow
