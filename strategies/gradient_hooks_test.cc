// GradientHooks: each parameter announced once its gradient is in its
// .grad(), in the order backward completes them, during backward; nothing
// after the hooks are gone; refusals.
#include "strategies/gradient_hooks.h"

#include <vector>

#include "ATen/ATen.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// y = w2 * relu(w1 * x + b1): backward reaches w2 first, then b1 and w1.
struct TwoLayers {
  std::vector<Parameter> parameters{
      {"w1", at::full({4}, 0.5).requires_grad_()},
      {"b1", at::full({4}, 0.1).requires_grad_()},
      {"w2", at::full({4}, 2.0).requires_grad_()}};
  at::Tensor Loss() const {
    const at::Tensor x = at::ones({4});
    at::Tensor hidden = at::relu(parameters[0].tensor * x + parameters[1].tensor);
    return (parameters[2].tensor * hidden).sum();
  }
};

TEST(GradientHooksTest, AnnouncesEachGradientOnceItIsAccumulated) {
  TwoLayers model;
  std::vector<size_t> order;
  std::vector<bool> grad_was_in;
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<GradientHooks> hooks,
      GradientHooks::Install(model.parameters, [&](size_t i) {
        order.push_back(i);
        // The hook runs after the accumulation: the gradient is there.
        const at::Tensor& grad = model.parameters[i].tensor.grad();
        grad_was_in.push_back(grad.defined() && grad.abs().sum().item<float>() > 0);
      }));
  model.Loss().backward();
  // w2's gradient comes first (the last layer); w1 and b1 in some order.
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], 2u);
  EXPECT_THAT(std::vector<size_t>(order.begin() + 1, order.end()),
              ::testing::UnorderedElementsAre(0u, 1u));
  EXPECT_THAT(grad_was_in, ElementsAre(true, true, true));
  // A second backward announces them again.
  model.Loss().backward();
  EXPECT_EQ(order.size(), 6u);
  // Gone with the hooks.
  hooks.reset();
  model.Loss().backward();
  EXPECT_EQ(order.size(), 6u) << "a hook outlived its GradientHooks";
}

TEST(GradientHooksTest, AnnouncesIntoGradientsThatAreViewsOfOneBuffer) {
  // As the data-parallel group sets them: each .grad() a view into a flat
  // buffer that backward accumulates into in place.
  TwoLayers model;
  at::Tensor flat = at::zeros({12});
  for (size_t i = 0; i < 3; ++i) {
    model.parameters[i].tensor.mutable_grad() = flat.narrow(0, 4 * static_cast<int64_t>(i), 4);
  }
  std::vector<float> seen(3, 0);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GradientHooks> hooks,
                       GradientHooks::Install(model.parameters, [&](size_t i) {
                         seen[i] = flat.narrow(0, 4 * static_cast<int64_t>(i), 4)
                                       .abs()
                                       .sum()
                                       .item<float>();
                       }));
  model.Loss().backward();
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(seen[i], 0) << "parameter " << i;
}

TEST(GradientHooksTest, RefusesATensorWithoutGradients) {
  std::vector<Parameter> parameters{{"frozen", at::ones({2})}};
  EXPECT_THAT(GradientHooks::Install(parameters, [](size_t) {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'frozen'")));
}

}  // namespace
}  // namespace rdmaflow::strategies
