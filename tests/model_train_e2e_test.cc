// End to end: a user's model, saved as TorchScript, trained by rdmaflow_train
// --model PATH.pt as OS processes over UCX shared memory. The models are
// built at test time by the build's torch (graph_analyzer/torch/
// test_models.py): the MLP with every strategy (ps, allreduce, gossip,
// moshpit, and layer_separated cut before its first linear layer), the
// ResNet-18-like CNN
// (allreduce and layer_separated) and the
// transformer encoder (int64 token ids) with all-reduce, all on synthetic
// data, each far above chance (10 %) after a few dozen steps.
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/train_runner.h"

namespace rdmaflow {
namespace {

// The Python whose torch the build uses (RDMAFLOW_PYTHON, which the BUILD
// rule sets to @rdmaflow_torch//:python).
std::string TorchPython() {
  const char* python = std::getenv("RDMAFLOW_PYTHON");
  return python != nullptr ? python : "RDMAFLOW_PYTHON-is-unset";
}

class ModelTrainE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/models"));
    made_ = std::system(absl::StrCat(TorchPython(), " graph_analyzer/torch/test_models.py ",
                                     *dir_, " mlp resnet18 transformer export_dynamic:mlp"
                                     " export_dynamic:resnet18")
                            .c_str()) == 0;
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    ASSERT_TRUE(made_) << TorchPython() << " graph_analyzer/torch/test_models.py failed (output above)";
  }
  static std::string Model(const std::string& name) {
    return absl::StrCat(*dir_, "/", name, ".pt");
  }
  static std::string* dir_;
  static bool made_;
};

std::string* ModelTrainE2eTest::dir_ = nullptr;
bool ModelTrainE2eTest::made_ = false;

TEST_F(ModelTrainE2eTest, AnMlpFileTrainsWithEveryWholeModelStrategy) {
  const std::pair<const char*, const char*> runs[] = {
      {"ps", "--local 3 --strategy ps"},
      {"allreduce", "--local 2 --strategy allreduce"},
      {"gossip", "--local 3 --strategy gossip"},
      {"moshpit", "--local 4 --strategy moshpit"},
      {"layer_separated", "--local 3 --strategy layer_separated"},
  };
  for (const auto& [name, flags] : runs) {
    SCOPED_TRACE(name);
    const testing::TrainRun run = testing::Train(
        absl::StrCat("mlp_", name),
        absl::StrCat(flags, " --model ", Model("mlp"), " --synthetic --steps 40"));
    const double accuracy = run.summary.test_accuracy();
    RecordProperty(absl::StrCat("test_accuracy_", name), absl::StrCat(accuracy));
    EXPECT_GT(accuracy, 0.5);
    // The analyzer imported the file: ps and allreduce placed it as planned.
    EXPECT_THAT(run.output, ::testing::Not(::testing::HasSubstr("could not import")));
    // The exchange each strategy declared, as the analyzer planned it: ps,
    // allreduce and layer_separated move tensors between ranks; gossip and
    // moshpit pick their peers at run time, so their graphs cross nothing.
    const bool static_exchange = std::string(name) != "gossip" && std::string(name) != "moshpit";
    EXPECT_EQ(run.summary.plan_transfers() > 0, static_exchange);
    EXPECT_EQ(run.summary.plan_registered_bytes() > 0, static_exchange);
  }
}

TEST_F(ModelTrainE2eTest, AResNetAndATransformerOnTokenIdsTrain) {
  double accuracy = testing::TrainAndGetAccuracy(
      "resnet18", absl::StrCat("--local 2 --strategy allreduce --model ", Model("resnet18"),
                               " --synthetic --steps 15 --batch_size 16"));
  RecordProperty("test_accuracy_resnet18", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.3);
  // Cut before its classifier: the residual blocks on two conv ranks, the
  // pooling and the linear layer on one FC rank.
  accuracy = testing::TrainAndGetAccuracy(
      "resnet18_layer_separated",
      absl::StrCat("--local 3 --strategy layer_separated --model ", Model("resnet18"),
                   " --synthetic --steps 15 --batch_size 16"));
  RecordProperty("test_accuracy_resnet18_layer_separated", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.3);
  accuracy = testing::TrainAndGetAccuracy(
      "transformer", absl::StrCat("--local 2 --strategy allreduce --model ",
                                  Model("transformer"),
                                  " --input 16:int64 --steps 40 --batch_size 32"));
  RecordProperty("test_accuracy_transformer", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.5);
}

// torch.export programs (.pt2, dynamic batch) train as their modules do:
// the program run by LibTorch's dispatcher with the file's weights, the
// analyzer's import of it placing ps.
TEST_F(ModelTrainE2eTest, TorchExportProgramsTrain) {
  const testing::TrainRun mlp = testing::Train(
      "mlp_export", absl::StrCat("--local 3 --strategy ps --model ", *dir_,
                                 "/mlp_dynamic.pt2 --synthetic --steps 40"));
  RecordProperty("test_accuracy_mlp_export", absl::StrCat(mlp.summary.test_accuracy()));
  EXPECT_GT(mlp.summary.test_accuracy(), 0.5);
  EXPECT_THAT(mlp.output, ::testing::Not(::testing::HasSubstr("could not import")));
  EXPECT_GT(mlp.summary.plan_transfers(), 0);
  // Batch norm in training mode, its statistics updated by the program.
  const double accuracy = testing::TrainAndGetAccuracy(
      "resnet18_export", absl::StrCat("--local 2 --strategy allreduce --model ", *dir_,
                                      "/resnet18_dynamic.pt2 --synthetic --steps 15"
                                      " --batch_size 16"));
  RecordProperty("test_accuracy_resnet18_export", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.3);
}

}  // namespace
}  // namespace rdmaflow
