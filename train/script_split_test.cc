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

TEST(ScriptSplitTest, AHeadWeightComputedBeforeTheCutStaysWithTheHead) {
  // The weight is scaled before the features run: it still belongs to the
  // head (the FC ranks update it), and scale to the features.
  auto model = Model(R"(
def forward(self, x):
    w = self.w * 2.0
    h = torch.relu(x * self.scale)
    return torch.linear(h, w, self.b)
)");
  SampleSpec sample;
  sample.shape = {8};
  ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, SplitScript(model, sample));
  EXPECT_THAT(split.head_parameters, UnorderedElementsAre("w", "b"));
  const torch::Tensor x = torch::randn({4, 8});
  EXPECT_TRUE(torch::allclose(split.head(split.features(x)), model->forward({x}).toTensor()));
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
  // The first linear reads something the input does not reach.
  EXPECT_THAT(SplitScript(Model(R"(
def forward(self, x):
    q = torch.linear(self.scale, self.w, self.b)
    return q + torch.relu(x * self.scale).sum()
)"), sample).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not read a value computed from the input")));
  // A parameter on both sides of the cut.
  EXPECT_THAT(SplitScript(Model(R"(
def forward(self, x):
    h = torch.relu(x * self.scale)
    return torch.linear(h, self.w, self.b) * self.scale[:3]
)"), sample).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("both sides")));
  SampleSpec tokens;
  tokens.shape = {8};
  tokens.int64 = true;
  EXPECT_THAT(SplitScript(Model(kScaledLinear), tokens).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token ids")));
}

}  // namespace
}  // namespace rdmaflow::train
