// File: train_runner.cc
#include "tests/train_runner.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/fake/fake_device.h"
#include "gtest/gtest.h"
#include "results/json.h"
#include "results/results.pb.h"

namespace rdmaflow::testing {

void TrainE2eTest::SetUp() {
  if (!std::ifstream(kFashionMnistLabels)) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (tools/setup.sh "
                    "installs it)";
  }
}

namespace {

// Runs rdmaflow_train with `flags`, its summary going to <TEST_TMPDIR>/<name>.json;
// returns its wait status (-1 when it could not start) and fills `output`.
int RunTrain(const std::string& name, const std::string& flags, std::string* json,
             std::string* output) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  *json = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".json");
  const std::string command =
      absl::StrCat("train/rdmaflow_train --progress=false --timeout_s 120 --json ",
                   *json, " ", flags, " 2>&1");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return -1;
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) *output += buffer;
  return pclose(pipe);
}

}  // namespace

TrainRun Train(const std::string& name, const std::string& flags) {
  TrainRun run;
  std::string json;
  const int status = RunTrain(name, flags, &json, &run.output);
  EXPECT_EQ(status, 0) << flags << "\n" << run.output;
  // --device mirror's ranks share the fake device's memory as CUDA's IPC
  // would: none may free what another still has open.
  EXPECT_EQ(run.output.find(device::FakeDevice::kFreedWhileOpen), std::string::npos)
      << flags << "\n" << run.output;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  const std::string summary = text.str();
  if (const absl::Status status = results::FromJson(summary, &run.summary); !status.ok()) {
    ADD_FAILURE() << "no summary in " << json << ": " << status << "\n" << run.output;
    run.summary.set_test_accuracy(-1);
    return run;
  }
  std::printf("%s: %s", name.c_str(), summary.c_str());
  return run;
}

std::string TrainExpectingFailure(const std::string& name, const std::string& flags) {
  std::string json, output;
  const int status = RunTrain(name, flags, &json, &output);
  EXPECT_NE(status, 0) << "the job succeeded: " << flags << "\n" << output;
  std::printf("%s:\n%s", name.c_str(), output.c_str());
  return output;
}

double TrainAndGetAccuracy(const std::string& name, const std::string& flags) {
  return Train(name, flags).summary.test_accuracy();
}

}  // namespace rdmaflow::testing
