// File: cost_model_test.cc
#include "strategies/layer_separated/cost_model.h"

#include "gtest/gtest.h"

namespace rdmaflow::strategies::layer_separated {
namespace {

TEST(CostModelTest, StepTimeByHand) {
  StanzaCosts c;
  c.conv_s = 0.010;
  c.fc_s = 0.002;
  c.activation_bytes = 1000000;
  c.conv_param_bytes = 4000000;
  c.fc_param_bytes = 40000000;
  c.bandwidth_bytes_per_s = 1e9;
  c.latency_s = 0;
  // 4 ranks, K=1: 3 conv ranks served by one FC rank.
  // 0.010 + 3*0.002 + 2*3*1e6/1e9 + max(2*2/3*4e6/1e9, 0) = 0.010+0.006+0.006+0.005333
  EXPECT_NEAR(StepSeconds(c, 4, 1), 0.027333, 1e-6);
  // K=2: 2 conv ranks, 1 each: 0.010 + 0.002 + 0.002 + max(4e-3, 40e-3) = 0.054
  EXPECT_NEAR(StepSeconds(c, 4, 2), 0.054, 1e-6);
  EXPECT_NEAR(RingSeconds(c, 1000, 1), 0, 1e-12);
}

TEST(CostModelTest, HeavyFcComputeWantsMoreFcRanksBigFcParametersFewer) {
  StanzaCosts c;
  c.conv_s = 0.010;
  c.activation_bytes = 100000;
  c.conv_param_bytes = 100000;
  c.bandwidth_bytes_per_s = 1e9;
  // FC compute as costly as conv, few FC parameters: split them.
  c.fc_s = 0.010;
  c.fc_param_bytes = 100000;
  EXPECT_GT(ChooseFcRanks(c, 8), 1);
  // Cheap FC compute, huge FC parameters (VGG): one FC rank, nothing to sync.
  c.fc_s = 0.001;
  c.fc_param_bytes = 400000000;
  EXPECT_EQ(ChooseFcRanks(c, 8), 1);
  EXPECT_EQ(ChooseFcRanks(c, 2), 1);
  EXPECT_NE(DescribeChoices(c, 3, 64).find("K=2"), std::string::npos);
}

}  // namespace
}  // namespace rdmaflow::strategies::layer_separated
