#include "train/device_model.h"

#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "runtime/torch/torch_cuda.h"
#include "strategies/device_tensors.h"
#include "strategies/exception_text.h"
#include "torch/script.h"
#include "torch/torch.h"

namespace rdmaflow::train {
namespace {

// Adds `grad` (the copy's) to `host`'s gradient, on the host.
void AddToHostGrad(const at::Tensor& host, const at::Tensor& grad) {
  torch::NoGradGuard no_grad;
  if (host.grad().defined()) {
    host.mutable_grad().add_(grad.to(at::kCPU));
    return;
  }
  // A copy even on the CPU (mirror): the host's gradient must not alias
  // the copy's, which the next batch zeroes and refills.
  host.mutable_grad() = grad.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

// A model's buffers (not parameters), in the module's order.
std::vector<at::Tensor> Buffers(const Model& model) {
  std::vector<at::Tensor> buffers;
  if (model.module != nullptr) {
    for (const at::Tensor& b : model.module->buffers()) buffers.push_back(b);
  } else if (model.script != nullptr) {
    for (const at::Tensor& b : model.script->buffers()) buffers.push_back(b);
  }
  return buffers;
}

}  // namespace

absl::Status DeviceModel::Prepare(const std::string& kind) {
  if (kind == "cuda") return runtime::torch::LoadTorchCuda();
  if (kind == "mirror" || kind == "cpu") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--device=", kind, ": the devices are cpu, cuda and mirror (a CPU copy, for tests)"));
}

absl::StatusOr<std::unique_ptr<DeviceModel>> DeviceModel::Create(const std::string& kind,
                                                                 const std::string& name,
                                                                 uint64_t seed,
                                                                 const SampleSpec& sample,
                                                                 const Model& host) {
  if (kind == "cpu") {
    return absl::InvalidArgumentError(
        "--device=cpu trains on the model itself: no device copy to make");
  }
  RETURN_IF_ERROR(Prepare(kind));
  std::unique_ptr<DeviceModel> self(new DeviceModel());
  if (kind == "cuda") self->device_ = at::Device(at::kCUDA, 0);
  if (host.program != nullptr) {
    return absl::UnimplementedError(
        "--device: a torch.export model (.pt2) trains on the CPU only; export it with "
        "torch.jit.script (.pt) to train it on a GPU");
  }
  ASSIGN_OR_RETURN(self->model_, MakeModel(name, seed, sample));
  try {
    if (self->model_.module != nullptr) self->model_.module->to(self->device_);
    if (self->model_.script != nullptr) self->model_.script->to(self->device_);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("moving model ", name, " to ",
                                            self->device_.str(), ": ",
                                            strategies::ExceptionText(e)));
  }
  for (const strategies::Parameter& p : host.Parameters()) self->host_.push_back(p.tensor);
  self->host_buffers_ = Buffers(host);
  self->copy_buffers_ = Buffers(self->model_);
  if (self->host_buffers_.size() != self->copy_buffers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", name, ": its buffers differ on ",
                                                   self->device_.str()));
  }
  for (const strategies::Parameter& p : self->model_.Parameters()) {
    self->copies_.push_back(p.tensor);
  }
  if (self->host_.size() != self->copies_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", name, ": ", self->host_.size(), " parameters on the host, ",
        self->copies_.size(), " in its copy on ", self->device_.str()));
  }
  for (size_t i = 0; i < self->host_.size(); ++i) {
    if (!self->host_[i].sizes().equals(self->copies_[i].sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", name, ": parameter ", i, " differs in shape on the host and ",
                       self->device_.str()));
    }
  }
  return self;
}

absl::StatusOr<strategies::ComputeResult> DeviceModel::Compute(const at::Tensor& x,
                                                               const at::Tensor& y) {
  if (use_ == Use::kSplit) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model_.name, " on ", device_.str(),
        ": Compute() after Split() (its hooks would add the gradients twice)"));
  }
  if (use_ == Use::kResident) {
    if (resident_split_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model ", model_.name, " on ", device_.str(), ": Compute() after ResidentSplit()"));
    }
    return ComputeResident(x, y);
  }
  use_ = Use::kCompute;
  // Compute()'s staging buffers, made at its first call (Split() needs
  // none), page-locked on a GPU: copies between them and the device run
  // at the link's speed and asynchronously, where pageable memory is
  // copied through the driver's own buffers in pieces and a fresh gradient
  // tensor each step faults its pages in first.
  if (in_stage_.empty() && !host_.empty()) {
    try {
      const bool pinned = device_.is_cuda();
      for (const at::Tensor& h : host_) {
        const at::TensorOptions options =
            at::TensorOptions().dtype(h.scalar_type()).pinned_memory(pinned);
        in_stage_.push_back(at::empty(h.sizes(), options));
        out_stage_.push_back(at::empty(h.sizes(), options));
      }
    } catch (const std::exception& e) {
      in_stage_.clear();
      out_stage_.clear();
      return absl::ResourceExhaustedError(absl::StrCat(
          "model ", model_.name, ": staging buffers for its parameters on ", device_.str(),
          device_.is_cuda() ? " (page-locked host memory)" : "", ": ",
          strategies::ExceptionText(e)));
    }
  }
  try {
    const absl::Time begin = absl::Now();
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < host_.size(); ++i) {
        // The stage is free: the last call's copies ended before it
        // returned (its synchronization below, or on a failure the
        // synchronization in the handler).
        in_stage_[i].copy_(host_[i]);
        copies_[i].copy_(in_stage_[i], /*non_blocking=*/true);
        if (copies_[i].grad().defined()) copies_[i].mutable_grad().zero_();
      }
    }
    const at::Tensor dx = x.to(device_);
    const at::Tensor dy = y.to(device_);
    const absl::Time in = absl::Now();
    absl::StatusOr<at::Tensor> forward = model_.Forward(dx);
    if (!forward.ok()) {
      SynchronizeDevice();  // the stage's copies in end before it is reused
      return forward.status();
    }
    at::Tensor logits = *std::move(forward);
    at::Tensor loss = at::cross_entropy_loss(logits, dy);
    loss.backward();
    // The kernels ran asynchronously: their end, for the times. (The
    // gradients' copies out would wait for it anyway.)
    SynchronizeDevice();
    const absl::Time computed = absl::Now();
    {
      torch::NoGradGuard no_grad;
      // All gradients out at once, then one wait for them.
      std::vector<bool> used(host_.size(), false);
      for (size_t i = 0; i < host_.size(); ++i) {
        const at::Tensor& grad = copies_[i].grad();
        if (!grad.defined()) continue;  // unused by this batch
        out_stage_[i].copy_(grad, /*non_blocking=*/true);
        used[i] = true;
      }
      SynchronizeDevice();
      for (size_t i = 0; i < host_.size(); ++i) {
        if (used[i]) AddToHostGrad(host_[i], out_stage_[i]);
      }
      for (size_t i = 0; i < host_buffers_.size(); ++i) {
        host_buffers_[i].copy_(copy_buffers_[i]);
      }
    }
    const absl::Time out = absl::Now();
    ++times_.calls;
    times_.in += in - begin;
    times_.compute += computed - in;
    times_.out += out - computed;
    const double accuracy = logits.argmax(1).eq(dy).to(at::kFloat).mean().item<double>();
    return strategies::ComputeResult{loss.item<double>(), accuracy, x.size(0)};
  } catch (const std::exception& e) {
    // The stage's copies end before it is reused (a broken device throws
    // again: nothing more to wait for then).
    try {
      SynchronizeDevice();
    } catch (const std::exception&) {
    }
    return absl::InternalError(absl::StrCat("model ", model_.name, " on ", device_.str(), ": ",
                                            strategies::ExceptionText(e)));
  }
}

absl::StatusOr<std::vector<strategies::Parameter>> DeviceModel::Resident() {
  if (use_ != Use::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model_.name, " on ", device_.str(),
        ": Resident() after Compute(), Split() or Resident() (its parameters are taken)"));
  }
  use_ = Use::kResident;
  return model_.Parameters();
}

absl::Status DeviceModel::CheckSplit() const {
  if (!model_.split_status.ok() || !model_.split.features || !model_.split.head) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model_.name, " has no features and head to run on ", device_.str(), ": ",
        model_.split_status.ok() ? "no split" : model_.split_status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<strategies::ModelSplit> DeviceModel::ResidentSplit() {
  if (use_ != Use::kResident || resident_split_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model_.name, " on ", device_.str(),
        ": ResidentSplit() comes once, after Resident()"));
  }
  RETURN_IF_ERROR(CheckSplit());
  resident_split_ = true;
  strategies::ModelSplit split = model_.split;
  // Outputs on the device (the activations go device to device where the
  // strategy can); an input on the host moves there, tracked: the backward
  // brings its gradient back to the host.
  split.features = [this, features = model_.split.features](const at::Tensor& x) {
    return features(x.to(device_));
  };
  split.head = [this, head_fn = model_.split.head](const at::Tensor& x) {
    return head_fn(x.to(device_));
  };
  split.device = device_;
  split.parameters_changed = nullptr;
  return split;
}

absl::StatusOr<strategies::ComputeResult> DeviceModel::ComputeResident(const at::Tensor& x,
                                                                       const at::Tensor& y) {
  try {
    const absl::Time begin = absl::Now();
    const at::Tensor dx = x.to(device_);
    const at::Tensor dy = y.to(device_);
    const absl::Time in = absl::Now();
    ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward(dx));
    at::Tensor loss = at::cross_entropy_loss(logits, dy);
    loss.backward();
    // The gradients are complete before the strategy's device work reads
    // them (its own stream: data_parallel.h). This thread's stream only
    // (backward ends with it waiting for autograd's): a strategy's
    // background work on a stream of its own (Moshpit's round) is not
    // waited for.
    if (absl::Status done = strategies::SynchronizeTorchStream(device_); !done.ok()) {
      return done;
    }
    ++times_.calls;
    times_.in += in - begin;
    times_.compute += absl::Now() - in;
    const double accuracy = logits.argmax(1).eq(dy).to(at::kFloat).mean().item<double>();
    return strategies::ComputeResult{loss.item<double>(), accuracy, x.size(0)};
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model ", model_.name, " on ", device_.str(), ": ",
                                            strategies::ExceptionText(e)));
  }
}

absl::Status DeviceModel::CopyToHost() {
  try {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < host_.size(); ++i) host_[i].copy_(copies_[i]);
    for (size_t i = 0; i < host_buffers_.size(); ++i) host_buffers_[i].copy_(copy_buffers_[i]);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model ", model_.name, ": its values from ",
                                            device_.str(), " to the host: ",
                                            strategies::ExceptionText(e)));
  }
}

absl::StatusOr<strategies::ModelSplit> DeviceModel::Split() {
  if (use_ != Use::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model_.name, " on ", device_.str(), ": Split() after ",
        use_ == Use::kSplit ? "Split()" : use_ == Use::kResident ? "Resident()" : "Compute()",
        " (the copy's gradients would reach the host twice)"));
  }
  RETURN_IF_ERROR(CheckSplit());
  const std::set<std::string> head(model_.split.head_parameters.begin(),
                                   model_.split.head_parameters.end());
  const std::vector<strategies::Parameter> named = model_.Parameters();
  Part features, head_part;
  for (size_t i = 0; i < named.size(); ++i) {
    (head.count(named[i].name) ? head_part : features).parameters.push_back(i);
  }
  // From here on the copy is the split's, even if hooking fails half-way:
  // a hooked parameter must not serve Compute() as well.
  use_ = Use::kSplit;
  try {
    for (size_t i = 0; i < copies_.size(); ++i) {
      // The copy's gradient joins the host parameter's as the backward
      // computes it: ModelSplit's users read the host's after backward().
      copies_[i].register_hook(
          [host = host_[i]](const at::Tensor& grad) { AddToHostGrad(host, grad); });
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model ", model_.name, " on ", device_.str(),
                                            ": hooking its parameters: ",
                                            strategies::ExceptionText(e)));
  }
  features_ = std::move(features);
  head_ = std::move(head_part);
  strategies::ModelSplit split = model_.split;
  split.features = [this, features = model_.split.features](const at::Tensor& x) {
    return RunPart(features, features_, x);
  };
  split.head = [this, head_fn = model_.split.head](const at::Tensor& x) {
    return RunPart(head_fn, head_, x);
  };
  split.parameters_changed = [this] { features_.stale = head_.stale = true; };
  return split;
}

void DeviceModel::SynchronizeDevice() const {
  // Thrown to the callers' handlers, as torch's own errors on the device.
  if (absl::Status done = strategies::SynchronizeTorchDevice(device_); !done.ok()) {
    throw std::runtime_error(std::string(done.message()));
  }
}

void DeviceModel::Refresh(Part& part) {
  if (!part.stale) return;
  torch::NoGradGuard no_grad;
  for (size_t i : part.parameters) {
    // In place, past the version counter (variable_data), as the
    // strategies' SGD writes the host's: what a pending backward saved,
    // the parameter or a view of it (a linear layer's weight.t()), reads
    // the new values, as it does on the host.
    copies_[i].variable_data().copy_(host_[i]);
    // The hook has handed every gradient on: the copy keeps none.
    copies_[i].mutable_grad() = at::Tensor();
  }
  part.stale = false;
}

at::Tensor DeviceModel::RunPart(const std::function<at::Tensor(const at::Tensor&)>& part_fn,
                                Part& part, const at::Tensor& x) {
  Refresh(part);
  // Tracked moves: the backward brings the input's gradient back to the
  // host (the head's activations) and the output's to the device.
  at::Tensor out = part_fn(x.to(device_)).to(at::kCPU);
  if (out.requires_grad()) {
    // Before the backward reaches the copy: the values of that moment
    // (runs on the thread that calls backward(), before any device work).
    out.register_hook([this, &part](const at::Tensor&) { Refresh(part); });
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < host_buffers_.size(); ++i) host_buffers_[i].copy_(copy_buffers_[i]);
  return out;
}

}  // namespace rdmaflow::train
