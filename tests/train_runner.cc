// File: train_runner.cc
#include "tests/train_runner.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rdmaflow::testing {

void TrainE2eTest::SetUp() {
  if (!std::ifstream(kFashionMnistLabels)) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (tools/setup.sh "
                    "installs it)";
  }
}

double TrainAndGetAccuracy(const std::string& name, const std::string& flags) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string json = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".json");
  const std::string command =
      absl::StrCat("train/rdmaflow_train --progress=false --timeout_s 120 --json ",
                   json, " ", flags, " 2>&1");
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

}  // namespace rdmaflow::testing
