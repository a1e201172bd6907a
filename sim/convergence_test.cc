// Time to accuracy from measured convergence: which measured run stands for
// a simulated one, the product, and the file's checks.
#include "sim/convergence.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::sim {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

ConvergencePoint Point(const char* rule, int workers, int steps) {
  ConvergencePoint p;
  p.set_spec(rule);
  p.set_update_rule(rule);
  p.set_ranks(workers);
  p.set_workers(workers);
  p.set_steps_run(500);
  p.set_steps_to_target(steps);
  return p;
}

Convergence Measured() {
  Convergence c;
  c.set_model("lenet5");
  c.set_target(0.8);
  *c.add_points() = Point("sgd", 3, 200);
  *c.add_points() = Point("sgd", 4, 150);
  *c.add_points() = Point("sgd", 8, 120);
  *c.add_points() = Point("ps:asp", 3, 300);
  *c.add_points() = Point("gossip:mode=pull", 4, 0);  // never got there
  return c;
}

SimulatedRun Simulated(const char* rule, int workers, double step_ms) {
  SimulatedRun run;
  run.set_model("lenet5");
  run.set_update_rule(rule);
  run.set_workers(workers);
  run.set_step_ms(step_ms);
  return run;
}

TEST(ConvergenceTest, TheMostWorkersNotAboveTheRunsElseTheFewest) {
  const Convergence c = Measured();
  EXPECT_EQ(FindConvergence(c, Simulated("sgd", 4, 1))->workers(), 4);
  EXPECT_EQ(FindConvergence(c, Simulated("sgd", 7, 1))->workers(), 4);
  EXPECT_EQ(FindConvergence(c, Simulated("sgd", 1024, 1))->workers(), 8);
  EXPECT_EQ(FindConvergence(c, Simulated("sgd", 2, 1))->workers(), 3);
  EXPECT_EQ(FindConvergence(c, Simulated("ps:asp", 63, 1))->workers(), 3);
  EXPECT_EQ(FindConvergence(c, Simulated("ps:ssp:3", 4, 1)), nullptr);  // another rule
  SimulatedRun vgg = Simulated("sgd", 4, 1);
  vgg.set_model("vgg");
  EXPECT_EQ(FindConvergence(c, vgg), nullptr);  // another model
}

TEST(ConvergenceTest, TimeToAccuracyIsStepsTimesStepTime) {
  const Convergence c = Measured();
  SimulatedRun run = Simulated("sgd", 64, 12.5);
  AddTimeToAccuracy(c, &run);
  EXPECT_EQ(run.steps_to_target(), 120);
  EXPECT_EQ(run.convergence_workers(), 8);
  EXPECT_DOUBLE_EQ(run.time_to_accuracy_s(), 120 * 12.5e-3);
  // Measured but never reached: which run was used, and no time.
  SimulatedRun gossip = Simulated("gossip:mode=pull", 16, 3);
  AddTimeToAccuracy(c, &gossip);
  EXPECT_EQ(gossip.convergence_workers(), 4);
  EXPECT_EQ(gossip.steps_to_target(), 0);
  EXPECT_EQ(gossip.time_to_accuracy_s(), 0);
  // Nothing measured: untouched.
  SimulatedRun moshpit = Simulated("moshpit:side=2,period=1", 16, 3);
  AddTimeToAccuracy(c, &moshpit);
  EXPECT_EQ(moshpit.convergence_workers(), 0);
  EXPECT_EQ(moshpit.time_to_accuracy_s(), 0);
}

TEST(ConvergenceTest, RejectsPointsItCannotUse) {
  EXPECT_OK(CheckConvergence(Measured()));
  for (auto spoil : std::vector<void (*)(ConvergencePoint*)>{
           [](ConvergencePoint* p) { p->clear_update_rule(); },
           [](ConvergencePoint* p) { p->set_workers(0); },
           [](ConvergencePoint* p) { p->set_steps_to_target(-1); },
           [](ConvergencePoint* p) { p->set_steps_to_target(501); },
           [](ConvergencePoint* p) { p->set_steps_run(2000000000); },
       }) {
    Convergence c = Measured();
    spoil(c.mutable_points(1));
    EXPECT_THAT(CheckConvergence(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("convergence point 1")));
  }
  // Two points of one rule and worker count would stand for the same runs.
  Convergence twice = Measured();
  *twice.add_points() = Point("sgd", 4, 170);
  EXPECT_THAT(CheckConvergence(twice),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points 1 ")));
  // The file's own fields: a model, a target accuracy in (0, 1].
  for (double target : {0.0, 1.5, std::nan("")}) {
    Convergence bad = Measured();
    bad.set_target(target);
    EXPECT_THAT(CheckConvergence(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target accuracy")));
  }
  Convergence nameless = Measured();
  nameless.clear_model();
  EXPECT_THAT(CheckConvergence(nameless),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model")));
}

}  // namespace
}  // namespace rdmaflow::sim
