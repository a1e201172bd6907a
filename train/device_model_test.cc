// DeviceModel on its CPU mirror (the --device cuda path without a GPU):
// two batches give the host parameters the gradients the host model itself
// accumulates over the same two batches, whether the host's gradients
// start undefined (gossip, moshpit) or point at memory of their own (ps,
// allreduce); the copy's BatchNorm statistics come back to the host; and a
// GPU that is not there is refused by name.
#include "train/device_model.h"

#include <vector>

#include "ATen/ATen.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "train/models.h"

namespace rdmaflow::train {
namespace {

using ::rdmaflow::testing::StatusIs;

// Two batches of Fashion-MNIST's shape.
std::vector<std::pair<at::Tensor, at::Tensor>> Batches() {
  at::manual_seed(7);
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < 2; ++i) {
    batches.push_back({at::randn({8, 1, 28, 28}), at::randint(0, 10, {8}, at::kLong)});
  }
  return batches;
}

// The gradients the model accumulates over both batches, computed on it.
std::vector<at::Tensor> Reference(const std::string& name) {
  absl::StatusOr<Model> model = MakeModel(name, /*seed=*/3);
  EXPECT_OK(model.status());
  for (const auto& [x, y] : Batches()) at::cross_entropy_loss(*model->Forward(x), y).backward();
  std::vector<at::Tensor> grads;
  for (const strategies::Parameter& p : model->Parameters()) grads.push_back(p.tensor.grad());
  return grads;
}

TEST(DeviceModelTest, TheMirrorAccumulatesTheHostsGradients) {
  const std::vector<at::Tensor> reference = Reference("lenet5");
  for (bool own_memory : {false, true}) {
    SCOPED_TRACE(own_memory ? "gradients in memory of their own" : "gradients undefined");
    ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
    if (own_memory) {
      for (const strategies::Parameter& p : host.Parameters()) {
        p.tensor.mutable_grad() = at::zeros_like(p.tensor);
      }
    }
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                         DeviceModel::Create("mirror", "lenet5", 3, {}, host));
    for (const auto& [x, y] : Batches()) ASSERT_OK(mirror->Compute(x, y).status());
    const std::vector<strategies::Parameter> params = host.Parameters();
    ASSERT_EQ(params.size(), reference.size());
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_TRUE(params[i].tensor.grad().defined()) << params[i].name;
      EXPECT_TRUE(at::allclose(params[i].tensor.grad(), reference[i], 1e-5, 1e-6))
          << params[i].name << ": max difference "
          << (params[i].tensor.grad() - reference[i]).abs().max().item<float>();
    }
  }
}

TEST(DeviceModelTest, UnknownDevicesAndMissingGpusAreRefused) {
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("mlp", /*seed=*/1));
  EXPECT_THAT(DeviceModel::Create("tpu", "mlp", 1, {}, host).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::unique_ptr<DeviceModel>> cuda =
      DeviceModel::Create("cuda", "mlp", 1, {}, host);
  if (!cuda.ok()) {
    // No GPU here: says why.
    EXPECT_THAT(cuda.status(), StatusIs(absl::StatusCode::kUnavailable));
  }
}

}  // namespace
}  // namespace rdmaflow::train
