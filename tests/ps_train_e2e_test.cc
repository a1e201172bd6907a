// End to end: rdmaflow_train runs a parameter server job as 3 OS processes
// (1 server, 2 workers) over UCX shared memory, on Fashion-MNIST from
// Debian's dataset-fashion-mnist, and LeNet-5 learns: test accuracy far
// above chance (10 %). Also asp with a straggler (one worker 2x slower).
// Skips when the dataset package is missing.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

constexpr char kDataset[] = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";

// Runs the harness with `flags`; returns its JSON summary's test accuracy.
double Train(const std::string& name, const std::string& flags) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string json = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".json");
  const std::string command =
      absl::StrCat("train/rdmaflow_train --local 3 --model lenet5 --progress=false "
                   "--timeout_s 120 --json ", json, " ", flags, " 2>&1");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return -1;
  }
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << command << "\n" << output;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  const std::string summary = text.str();
  const std::string key = "\"test_accuracy\": ";
  const size_t at = summary.find(key);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no summary in " << json << "\n" << output;
    return -1;
  }
  double accuracy = -1;
  EXPECT_TRUE(absl::SimpleAtod(
      summary.substr(at + key.size(), summary.find(',', at) - at - key.size()),
      &accuracy));
  std::printf("%s: %s", name.c_str(), summary.c_str());
  return accuracy;
}

class PsTrainE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(kDataset)) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed (tools/setup.sh "
                      "installs it)";
    }
  }
};

TEST_F(PsTrainE2eTest, LeNetLearnsFashionMnistWithBsp) {
  const double accuracy = Train("bsp", "--sync bsp --steps 300");
  RecordProperty("test_accuracy", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.70);
}

TEST_F(PsTrainE2eTest, LeNetLearnsWithAspAndAStraggler) {
  const double accuracy =
      Train("asp", "--sync asp --steps 200 --slow_rank 1 --slow_factor 2");
  RecordProperty("test_accuracy", absl::StrCat(accuracy));
  EXPECT_GT(accuracy, 0.60);
}

}  // namespace
}  // namespace rdmaflow
