// File: layer_profile_test.cc
// The profile's structure (parts, head flags, bytes) is exact; its times are
// only checked to be measured (positive), never against a limit.
#include "train/layer_profile.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::train {
namespace {

using ::rdmaflow::testing::StatusIs;

TEST(LayerProfileTest, LeNetPerModuleWithItsHeadAndBytes) {
  ASSERT_OK_AND_ASSIGN(Model model, MakeModel("lenet5", 1, SampleSpec{}));
  ASSERT_OK_AND_ASSIGN(sim::ModelProfile profile, ProfileLayers(model, SampleSpec{}, {8, 2}));
  EXPECT_EQ(profile.model(), "lenet5");
  EXPECT_EQ(profile.batch_size(), 8);
  double params = 0, head_params = 0;
  bool seen_head = false;
  double last_features_output = 0;
  for (const sim::LayerProfile& layer : profile.layers()) {
    EXPECT_GE(layer.forward_ms(), 0) << layer.name();
    // Every part has parameters or follows one that has: it has a backward.
    EXPECT_GT(layer.backward_ms(), 0) << layer.name();
    params += layer.param_bytes();
    if (layer.head()) {
      seen_head = true;
      head_params += layer.param_bytes();
    } else {
      EXPECT_FALSE(seen_head) << "features after the head: " << layer.name();
      last_features_output = layer.output_bytes();
    }
  }
  int64_t count = 0;
  for (const strategies::Parameter& p : model.Parameters()) count += p.tensor.numel();
  EXPECT_DOUBLE_EQ(params, 4.0 * count);
  // FC 400-120-84-10 (weights and biases).
  EXPECT_DOUBLE_EQ(head_params, 4.0 * (400 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10));
  // The features end in 16 maps of 5x5, flattened, per sample.
  EXPECT_DOUBLE_EQ(last_features_output, 4.0 * 8 * 400);
  EXPECT_EQ(profile.layers().rbegin()->output_bytes(), 4.0 * 8 * 10);
  EXPECT_GT(profile.step_ms(), 0);
  EXPECT_GE(profile.step_jitter(), 0);
  EXPECT_LT(profile.step_jitter(), 1);
  EXPECT_GT(profile.optimizer_ms(), 0);
  // Every parameter got a gradient-free model back.
  for (const strategies::Parameter& p : model.Parameters()) EXPECT_FALSE(p.tensor.grad().defined());
}

TEST(LayerProfileTest, ResNetAsFeaturesAndHead) {
  ASSERT_OK_AND_ASSIGN(Model model, MakeModel("resnet", 1, SampleSpec{}));
  ASSERT_OK_AND_ASSIGN(sim::ModelProfile profile, ProfileLayers(model, SampleSpec{}, {4, 1}));
  ASSERT_EQ(profile.layers_size(), 2);
  EXPECT_EQ(profile.layers(0).name(), "features");
  EXPECT_FALSE(profile.layers(0).head());
  EXPECT_TRUE(profile.layers(1).head());
  EXPECT_DOUBLE_EQ(profile.layers(1).param_bytes(), 4.0 * (32 * 10 + 10));
  EXPECT_GT(profile.layers(0).backward_ms(), 0);
}

TEST(LayerProfileTest, BadOptionsAreRefused) {
  ASSERT_OK_AND_ASSIGN(Model model, MakeModel("mlp", 1, SampleSpec{}));
  EXPECT_THAT(ProfileLayers(model, SampleSpec{}, {0, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("batch")));
}

}  // namespace
}  // namespace rdmaflow::train
