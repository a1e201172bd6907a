// SplitScript on TorchScript modules compiled here: the two halves compose
// to the model, the head's parameters are named, gradients reach the
// features' parameters, and models that cannot be cut there are refused
// with the reason.
#include "train/script_split.h"

#include <memory>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::train {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// scale, then a linear head: features(x) = relu(x * scale).
std::shared_ptr<torch::jit::Module> Model(const std::string& forward) {
  torch::manual_seed(0);
  auto m = std::make_shared<torch::jit::Module>("Model");
  m->register_parameter("scale", (torch::rand({8}) + 0.5).requires_grad_(), false);
  m->register_parameter("w", torch::randn({3, 8}).requires_grad_(), false);
  m->register_parameter("b", torch::randn({3}).requires_grad_(), false);
  m->define(forward);
  return m;
}

constexpr char kScaledLinear[] = R"(
def forward(self, x):
    h = torch.relu(x * self.scale)
    return torch.linear(h, self.w, self.b)
)";

TEST(ScriptSplitTest, TheHalvesComposeToTheModelAndGradientsReachBoth) {
  auto model = Model(kScaledLinear);
  SampleSpec sample;
  sample.shape = {8};
  ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, SplitScript(model, sample));
  EXPECT_THAT(split.head_parameters, UnorderedElementsAre("w", "b"));
  EXPECT_EQ(split.activation_shape, (std::vector<int64_t>{8}));
  const torch::Tensor x = torch::randn({4, 8});
  const torch::Tensor whole = model->forward({x}).toTensor();
  torch::Tensor h = split.features(x);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::allclose(h, torch::relu(x * model->attr("scale").toTensor())));
  }
  EXPECT_TRUE(torch::allclose(split.head(h), whole));
  // Backward through both halves reaches the features' parameter.
  split.head(split.features(x)).sum().backward();
  const torch::Tensor scale = model->attr("scale").toTensor();
  ASSERT_TRUE(scale.grad().defined());
  EXPECT_GT(scale.grad().abs().sum().item<float>(), 0);
  EXPECT_TRUE(model->attr("w").toTensor().grad().defined());
}

TEST(ScriptSplitTest, ModelsThatCannotBeCutThereAreRefusedWithTheReason) {
  SampleSpec sample;
  sample.shape = {8};
  EXPECT_THAT(SplitScript(Model(R"(
def forward(self, x):
    return torch.relu(x * self.scale)
)"), sample).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no aten::linear")));
  // The input also feeds the output past the cut: a connection over it.
  EXPECT_THAT(SplitScript(Model(R"(
def forward(self, x):
    h = torch.relu(x * self.scale)
    return torch.linear(h, self.w, self.b) + x.sum()
)"), sample).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("crosses")));
}

}  // namespace
}  // namespace rdmaflow::train
