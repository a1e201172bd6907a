// End to end: rdmaflow_train runs a parameter server job as 3 OS processes
// (1 server, 2 workers) over UCX shared memory, on Fashion-MNIST from
// Debian's dataset-fashion-mnist, and LeNet-5 learns: test accuracy far
// above chance (10 %). Also asp with a straggler (one worker 2x slower),
// the step timeline every rank writes, and the warning of a run whose loss
// rose. Skips when the dataset package
// is missing.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "results/chrome_trace.pb.h"
#include "results/json.h"
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

// A run whose loss ends above its first step's says so, with what to try;
// one that learns says nothing of the kind.
TEST_F(PsTrainE2eTest, ARunWhoseLossRisesIsSaidToHaveDiverged) {
  const std::string said = "the run diverged or did not learn";
  const testing::TrainRun diverged =
      testing::Train("diverged", "--local 2 --model lenet5 --steps 20 --lr 20");
  EXPECT_NE(diverged.output.find(said), std::string::npos) << diverged.output;
  EXPECT_NE(diverged.output.find("try a smaller --lr"), std::string::npos);
  const testing::TrainRun learns = testing::Train("learns", "--local 2 --model lenet5 --steps 20");
  EXPECT_EQ(learns.output.find(said), std::string::npos) << learns.output;
}

// With --log_prefix every rank writes its step timeline as a Chrome trace
// (train/timeline_trace.h): the workers' steps pull, compute and push one
// after the other, so each step has compute and communication spans and
// the summary's overlap is 0; the server's steps wait for a gradient.
TEST_F(PsTrainE2eTest, EveryRankWritesItsStepTimeline) {
  const std::string prefix = absl::StrCat(std::getenv("TEST_TMPDIR"), "/timeline");
  const testing::TrainRun run = testing::Train(
      "timeline",
      absl::StrCat("--local 3 --model lenet5 --steps 6 --log_prefix ", prefix));
  ASSERT_GT(run.summary.mean_step_ms(), 0) << run.output;
  // The median step is one of the steps: above 0, below the whole run.
  EXPECT_GT(run.summary.median_step_ms(), 0);
  EXPECT_LT(run.summary.median_step_ms(), 1000 * run.summary.wall_s());
  EXPECT_EQ(run.summary.mean_overlap_ms(), 0);
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    std::ifstream file(absl::StrCat(prefix, ".rank", rank, ".timeline.json"));
    ASSERT_TRUE(file.good());
    std::stringstream json;
    json << file.rdbuf();
    results::ChromeTrace trace;
    ASSERT_TRUE(results::FromJson(json.str(), &trace).ok());
    std::map<std::string, int> spans;  // by row (category)
    for (const results::TraceEvent& event : trace.traceevents()) {
      if (event.ph() != "X") continue;
      EXPECT_EQ(event.pid(), rank);
      EXPECT_GE(event.dur(), 0);
      ++spans[event.cat()];
    }
    // Rank 0 is the server: a step (a wait, then the optimizer) per
    // gradient it took, 2 workers x 6 (6 updates under bsp).
    const int steps = rank == 0 ? 2 * 6 : 6;
    EXPECT_EQ(spans["compute"], steps);
    EXPECT_EQ(spans["wait"], steps);
    EXPECT_EQ(spans["communication"], rank == 0 ? steps : 2 * steps);
  }
}

}  // namespace
}  // namespace rdmaflow
