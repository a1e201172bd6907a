// DeviceModel on its CPU mirror (the --device cuda path without a GPU):
// two batches give the host parameters the gradients the host model itself
// accumulates over the same two batches, whether the host's gradients
// start undefined (gossip, moshpit) or point at memory of their own (ps,
// allreduce); the copy's BatchNorm statistics come back to the host; and a
// GPU that is not there is refused by name; each batch computes with the
// host's values of its moment. Resident, the copy's own parameters take
// the gradients and the host takes their values only when copied back. Its split (layer_separated's
// features and head) back-propagates the same gradients into the host's
// parameters, also with a batch forwarded ahead, takes the host's values
// once told they changed, and runs a backward still due when they changed
// with the new values, as the host model does.
#include "train/device_model.h"

#include <functional>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/core/grad_mode.h"
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

// The host parameters hold `reference`'s gradients.
void ExpectGradients(const Model& host, const std::vector<at::Tensor>& reference) {
  const std::vector<strategies::Parameter> params = host.Parameters();
  ASSERT_EQ(params.size(), reference.size());
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].tensor.grad().defined()) << params[i].name;
    EXPECT_TRUE(at::allclose(params[i].tensor.grad(), reference[i], 1e-5, 1e-6))
        << params[i].name << ": max difference "
        << (params[i].tensor.grad() - reference[i]).abs().max().item<float>();
  }
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
    ExpectGradients(host, reference);
  }
}

// A step of the strategy's between batches (new values in the host
// parameters, their gradients zeroed): the next batch computes with the
// new values, staged in afresh, and its gradients alone reach the host.
TEST(DeviceModelTest, EachBatchTakesTheHostsValuesOfItsMoment) {
  const auto batches = Batches();
  auto step = [](const Model& model) {
    at::NoGradGuard no_grad;
    for (const strategies::Parameter& p : model.Parameters()) {
      p.tensor.sub_(p.tensor.grad(), /*alpha=*/0.5);
      p.tensor.mutable_grad().zero_();
    }
  };
  ASSERT_OK_AND_ASSIGN(Model reference, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  for (const auto& [x, y] : batches) {
    at::cross_entropy_loss(*reference.Forward(x), y).backward();
    ASSERT_OK(mirror->Compute(x, y).status());
    std::vector<at::Tensor> grads;
    for (const strategies::Parameter& p : reference.Parameters()) {
      grads.push_back(p.tensor.grad().clone());
    }
    ExpectGradients(host, grads);
    step(reference);
    step(host);
  }
  EXPECT_EQ(mirror->times().calls, static_cast<int64_t>(batches.size()));
}

// A strategy that takes device parameters: Resident() hands it the copy's
// own parameters (the host's names), Compute() accumulates the batches'
// gradients into them with the host model untouched, and CopyToHost()
// brings the host's values up to date; the copy serves one use.
TEST(DeviceModelTest, ResidentParametersLeaveTheHostUntilCopiedBack) {
  const std::vector<at::Tensor> reference = Reference("lenet5");
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK_AND_ASSIGN(std::vector<strategies::Parameter> copy, mirror->Resident());
  EXPECT_TRUE(mirror->resident());
  const std::vector<strategies::Parameter> params = host.Parameters();
  ASSERT_EQ(copy.size(), params.size());
  for (size_t i = 0; i < copy.size(); ++i) {
    EXPECT_EQ(copy[i].name, params[i].name);
    EXPECT_NE(copy[i].tensor.data_ptr(), params[i].tensor.data_ptr()) << copy[i].name;
  }
  for (const auto& [x, y] : Batches()) ASSERT_OK(mirror->Compute(x, y).status());
  for (size_t i = 0; i < copy.size(); ++i) {
    EXPECT_FALSE(params[i].tensor.grad().defined()) << params[i].name;
    ASSERT_TRUE(copy[i].tensor.grad().defined()) << copy[i].name;
    EXPECT_TRUE(at::allclose(copy[i].tensor.grad(), reference[i], 1e-5, 1e-6)) << copy[i].name;
  }
  EXPECT_EQ(mirror->times().calls, 2);
  // A strategy's update on the device: the host sees it once copied back.
  {
    at::NoGradGuard no_grad;
    for (const strategies::Parameter& p : copy) p.tensor.sub_(p.tensor.grad(), 0.5);
  }
  EXPECT_FALSE(at::equal(params[0].tensor, copy[0].tensor));
  ASSERT_OK(mirror->CopyToHost());
  for (size_t i = 0; i < copy.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i].tensor, copy[i].tensor)) << params[i].name;
  }
  EXPECT_THAT(mirror->Resident().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("Resident()")));
  EXPECT_THAT(mirror->Split().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("Resident()")));
  // Staged first, resident never.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> staged,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK(staged->Compute(Batches()[0].first, Batches()[0].second).status());
  EXPECT_THAT(staged->Resident().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// layer_separated's use: features on a batch, the head on a detached
// copy of the activations, the head's backward, then the features' with
// the activations' gradient, as the conv and FC ranks do. `pipelined`
// forwards both batches before either goes back, as Stanza's pipeline
// does (the second forward refreshes the copy's parameters while the
// first batch's backward is still due; the strategy's word that the
// values changed, with the values as they were, changes nothing).
void TrainSplit(const strategies::ModelSplit& split, bool pipelined) {
  const auto batches = Batches();
  std::vector<at::Tensor> acts;
  auto back = [&](size_t i) {
    at::Tensor a = acts[i].detach().requires_grad_(true);
    at::cross_entropy_loss(split.head(a), batches[i].second).backward();
    acts[i].backward(a.grad());
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    acts.push_back(split.features(batches[i].first));
    if (!pipelined) back(i);
    if (pipelined && split.parameters_changed) split.parameters_changed();
  }
  if (pipelined) {
    for (size_t i = 0; i < batches.size(); ++i) back(i);
  }
}

TEST(DeviceModelTest, TheSplitBackPropagatesIntoTheHostsParameters) {
  const std::vector<at::Tensor> reference = Reference("lenet5");
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "both batches forwarded first" : "batch by batch");
    ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                         DeviceModel::Create("mirror", "lenet5", 3, {}, host));
    ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, mirror->Split());
    EXPECT_EQ(split.head_parameters, host.split.head_parameters);
    EXPECT_EQ(split.sample_shape, host.split.sample_shape);
    TrainSplit(split, pipelined);
    ExpectGradients(host, reference);
  }
}

// layer_separated on device parameters: ResidentSplit() (after Resident()
// only, once) runs the halves on the copy's own parameters, whose
// gradients are the host model's own over the same batches; the host's
// stay untouched; the copy serves the split alone.
TEST(DeviceModelTest, TheResidentSplitBackPropagatesIntoTheCopysParameters) {
  const std::vector<at::Tensor> reference = Reference("lenet5");
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  EXPECT_THAT(mirror->ResidentSplit().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("Resident()")));
  ASSERT_OK_AND_ASSIGN(std::vector<strategies::Parameter> copy, mirror->Resident());
  ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, mirror->ResidentSplit());
  EXPECT_EQ(split.head_parameters, host.split.head_parameters);
  EXPECT_FALSE(static_cast<bool>(split.parameters_changed));
  TrainSplit(split, /*pipelined=*/false);
  const std::vector<strategies::Parameter> params = host.Parameters();
  for (size_t i = 0; i < copy.size(); ++i) {
    EXPECT_FALSE(params[i].tensor.grad().defined()) << params[i].name;
    ASSERT_TRUE(copy[i].tensor.grad().defined()) << copy[i].name;
    EXPECT_TRUE(at::allclose(copy[i].tensor.grad(), reference[i], 1e-5, 1e-6)) << copy[i].name;
  }
  EXPECT_THAT(mirror->ResidentSplit().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(mirror->Compute(Batches()[0].first, Batches()[0].second).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("ResidentSplit()")));
}

TEST(DeviceModelTest, TheSplitTakesTheHostsValuesOnceTold) {
  // The strategies' SGD writes the host parameters in place, then says so
  // (parameters_changed): the copy runs with the new values from then on.
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, mirror->Split());
  ASSERT_TRUE(split.parameters_changed);
  const at::Tensor x = Batches()[0].first;
  const at::Tensor before = split.features(x);
  {
    at::NoGradGuard no_grad;
    for (const strategies::Parameter& p : host.Parameters()) p.tensor.mul_(0.5);
  }
  split.parameters_changed();
  const at::Tensor on_copy = split.features(x);
  const at::Tensor on_host = host.split.features(x);
  EXPECT_FALSE(at::allclose(before, on_host, 1e-5, 1e-6)) << "the update changed nothing";
  EXPECT_TRUE(at::allclose(on_copy, on_host, 1e-5, 1e-6))
      << "max difference " << (on_copy - on_host).abs().max().item<float>();
}

// Re-points `model`'s parameters at storage of their own (returned), as
// DataParallelGroup does at its flat buffer: the strategies' SGD then
// writes them in place without the parameters' version counters.
std::vector<at::Tensor> RepointParameters(const Model& model) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> storage;
  for (const strategies::Parameter& p : model.Parameters()) {
    storage.push_back(p.tensor.detach().clone());
    p.tensor.set_data(storage.back());
  }
  return storage;
}

// One batch through `split` with the values changed by `update` after
// both forwards and before either backward (Stanza's pipeline updates
// between a batch's forward and its backward).
void TrainAcrossAnUpdate(const strategies::ModelSplit& split,
                         const std::function<void()>& update) {
  const auto batch = Batches()[0];
  const at::Tensor acts = split.features(batch.first);
  const at::Tensor a = acts.detach().requires_grad_(true);
  const at::Tensor loss = at::cross_entropy_loss(split.head(a), batch.second);
  update();
  loss.backward();
  acts.backward(a.grad());
}

TEST(DeviceModelTest, ABackwardStillDueRunsWithTheValuesOfItsMoment) {
  auto halve = [](std::vector<at::Tensor>& storage) {
    at::NoGradGuard no_grad;
    for (at::Tensor& t : storage) t.mul_(0.5);
  };
  // On the host model itself: the backward reads the halved values, also
  // through the views its forward saved.
  ASSERT_OK_AND_ASSIGN(Model reference, MakeModel("lenet5", /*seed=*/3));
  std::vector<at::Tensor> reference_storage = RepointParameters(reference);
  TrainAcrossAnUpdate(reference.split, [&] { halve(reference_storage); });
  std::vector<at::Tensor> expected;
  for (const strategies::Parameter& p : reference.Parameters()) {
    expected.push_back(p.tensor.grad());
  }
  // The update matters: without it the gradients of every layer below the
  // last are other than these (the last one's come from its input and the
  // loss, both of the forward), so a copy that kept its old values could
  // not pass.
  ASSERT_OK_AND_ASSIGN(Model unchanged, MakeModel("lenet5", /*seed=*/3));
  TrainAcrossAnUpdate(unchanged.split, [] {});
  const std::vector<strategies::Parameter> unchanged_params = unchanged.Parameters();
  ASSERT_EQ(unchanged_params.size(), expected.size());
  size_t changed = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    changed += at::allclose(unchanged_params[i].tensor.grad(), expected[i], 1e-5, 1e-6) ? 0 : 1;
  }
  EXPECT_EQ(changed, expected.size() - 2) << "of " << expected.size() << " gradients";
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  std::vector<at::Tensor> storage = RepointParameters(host);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> mirror,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK_AND_ASSIGN(strategies::ModelSplit split, mirror->Split());
  TrainAcrossAnUpdate(split, [&] {
    halve(storage);
    split.parameters_changed();
  });
  ExpectGradients(host, expected);
}

TEST(DeviceModelTest, ACopyServesComputeOrSplitNotBoth) {
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("lenet5", /*seed=*/3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> split_copy,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK(split_copy->Split().status());
  EXPECT_THAT(split_copy->Split().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  const auto batch = Batches()[0];
  EXPECT_THAT(split_copy->Compute(batch.first, batch.second).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceModel> compute_copy,
                       DeviceModel::Create("mirror", "lenet5", 3, {}, host));
  ASSERT_OK(compute_copy->Compute(batch.first, batch.second).status());
  EXPECT_THAT(compute_copy->Split().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(DeviceModelTest, UnknownDevicesAndMissingGpusAreRefused) {
  ASSERT_OK_AND_ASSIGN(Model host, MakeModel("mlp", /*seed=*/1));
  EXPECT_THAT(DeviceModel::Create("tpu", "mlp", 1, {}, host).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DeviceModel::Prepare("tpu"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(DeviceModel::Prepare("mirror"));
  absl::StatusOr<std::unique_ptr<DeviceModel>> cuda =
      DeviceModel::Create("cuda", "mlp", 1, {}, host);
  if (!cuda.ok()) {
    // No GPU here (kUnavailable, saying why), or torch was asked about CUDA
    // before its CUDA library was loaded (MakeModel above seeds torch).
    EXPECT_THAT(cuda.status().code(), ::testing::AnyOf(absl::StatusCode::kUnavailable,
                                                     absl::StatusCode::kFailedPrecondition))
        << cuda.status();
    EXPECT_EQ(DeviceModel::Prepare("cuda"), cuda.status());
  }
}

}  // namespace
}  // namespace rdmaflow::train
