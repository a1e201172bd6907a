// File: gradient_hooks.cc
#include "strategies/gradient_hooks.h"

#include "absl/strings/str_cat.h"
#include "torch/csrc/autograd/function.h"
#include "torch/csrc/autograd/function_hook.h"
#include "torch/csrc/autograd/variable.h"

namespace rdmaflow::strategies {
namespace {

// Calls `ready(index)` after the accumulator it hangs on has run.
class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(const std::function<void(size_t)>* ready, size_t index)
      : ready_(ready), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    (*ready_)(index_);
    return outputs;
  }

 private:
  const std::function<void(size_t)>* ready_;  // the GradientHooks' own
  size_t index_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradientHooks>> GradientHooks::Install(
    const std::vector<Parameter>& parameters, std::function<void(size_t index)> ready) {
  std::unique_ptr<GradientHooks> hooks(new GradientHooks());
  hooks->ready_ = std::move(ready);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const at::Tensor& tensor = parameters[i].tensor;
    if (!tensor.defined() || !tensor.is_leaf() || !tensor.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", parameters[i].name,
          "' is not a leaf tensor that requires gradients: backward never accumulates "
          "a gradient into it to announce"));
    }
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(tensor);
    if (accumulator == nullptr) {
      return absl::InternalError(absl::StrCat(
          "autograd has no gradient accumulator for parameter '", parameters[i].name, "'"));
    }
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<ReadyHook>(&hooks->ready_, i));
    hooks->hooks_.emplace_back(std::move(accumulator), key);
  }
  return hooks;
}

GradientHooks::~GradientHooks() {
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
}

}  // namespace rdmaflow::strategies
