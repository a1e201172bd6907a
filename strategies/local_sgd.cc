// File: local_sgd.cc
#include "strategies/local_sgd.h"

#include "ATen/core/grad_mode.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/str_cat.h"
#include "collectives/buckets.h"
#include "common/status_macros.h"
#include "strategies/device_tensors.h"

namespace rdmaflow::strategies {

absl::StatusOr<std::unique_ptr<LocalSgd>> LocalSgd::Create(
    const std::string& strategy, std::vector<Parameter> parameters, c10::Device where) {
  RETURN_IF_ERROR(CheckParametersOn(strategy, parameters, where));
  std::vector<size_t> bytes;
  for (const Parameter& p : parameters) {
    bytes.push_back(p.tensor.numel() * sizeof(float));
  }
  ASSIGN_OR_RETURN(collectives::FusedLayout layout, collectives::LayOut(bytes, 64));
  if (layout.total_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(strategy, ": the model has no parameters"));
  }
  std::unique_ptr<LocalSgd> sgd(new LocalSgd());
  sgd->bytes_ = layout.total_bytes;
  const int64_t elements = layout.total_bytes / sizeof(float);
  const at::TensorOptions flat = at::TensorOptions().dtype(at::kFloat).device(where);
  sgd->flat_ = at::zeros({elements}, flat);
  sgd->momentum_ = at::zeros({elements}, flat);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor& p = parameters[i].tensor;
    sgd->offsets_.push_back(layout.offsets[i] / sizeof(float));
    at::Tensor view = sgd->flat_.narrow(0, sgd->offsets_.back(), p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
  }
  sgd->parameters_ = std::move(parameters);
  return sgd;
}

void LocalSgd::ZeroGradients() {
  for (Parameter& p : parameters_) {
    if (p.tensor.grad().defined()) p.tensor.mutable_grad().zero_();
  }
}

void LocalSgd::Step(double learning_rate, double momentum) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& grad = parameters_[i].tensor.grad();
    if (!grad.defined()) continue;
    at::Tensor v = momentum_.narrow(0, offsets_[i], grad.numel()).view(grad.sizes());
    v.mul_(momentum).add_(grad);
    parameters_[i].tensor.add_(v, -learning_rate);
  }
}

}  // namespace rdmaflow::strategies
