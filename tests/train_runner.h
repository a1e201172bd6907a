// File: train_runner.h
// -----------------------------------------------------------------------------
// For end-to-end tests: runs train/rdmaflow_train (a data dependency of the
// test) with some flags and returns the test accuracy from its JSON summary
// (a results::TrainingSummary, read with results::FromJson), recording a gtest failure (with the harness's output) when it fails.
#ifndef RDMAFLOW_TESTS_TRAIN_RUNNER_H_
#define RDMAFLOW_TESTS_TRAIN_RUNNER_H_

#include <string>

#include "gtest/gtest.h"
#include "results/results.pb.h"

namespace rdmaflow::testing {

// Path of the Fashion-MNIST file whose absence makes these tests skip.
inline constexpr char kFashionMnistLabels[] =
    "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";

// Skips (with the reason) when Debian's dataset-fashion-mnist is missing.
class TrainE2eTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

// One run: its summary (empty after a failure) and what it printed.
struct TrainRun {
  results::TrainingSummary summary;
  std::string output;
};

// `name` names the run's JSON file in TEST_TMPDIR; `flags` are passed as
// they are (--local, --model, --strategy, ...). A gtest failure also when a
// rank freed fake device memory another still had open.
TrainRun Train(const std::string& name, const std::string& flags);
// A run that must fail (a gtest failure if it succeeds): what it printed.
std::string TrainExpectingFailure(const std::string& name, const std::string& flags);
// Train()'s test accuracy; -1 on failure.
double TrainAndGetAccuracy(const std::string& name, const std::string& flags);

}  // namespace rdmaflow::testing

#endif  // RDMAFLOW_TESTS_TRAIN_RUNNER_H_
