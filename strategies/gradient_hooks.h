// File: gradient_hooks.h
// -----------------------------------------------------------------------------
// GradientHooks: tells its owner, during backward, the moment each
// parameter's gradient has been accumulated into its .grad(): a post hook
// on the parameter's gradient accumulator, as DDP's reducer registers. The
// allreduce strategy's bucket pipeline (bucket_pipeline.h) starts a
// bucket's all-reduce once all of its gradients are in.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<GradientHooks> hooks,
//                    GradientHooks::Install(parameters, [&](size_t i) { ... }));
//   loss.backward();  // `ready(i)` for each parameter backward reaches
//
// `ready` runs on the thread that runs backward (on CPU, the caller of
// backward()), once per accumulation: a backward that reaches a parameter
// twice (two uses in forward) accumulates their sum once. It must not
// throw. The hooks stay on the accumulators, which they keep alive, until
// the GradientHooks is destroyed.
#ifndef RDMAFLOW_STRATEGIES_GRADIENT_HOOKS_H_
#define RDMAFLOW_STRATEGIES_GRADIENT_HOOKS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "strategies/strategy.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace rdmaflow::strategies {

// Thread-compatible; destroy it where no backward runs.
class GradientHooks {
 public:
  // Hooks every parameter's gradient accumulator: kInvalidArgument naming
  // a parameter that is not a leaf requiring gradients (it has none).
  static absl::StatusOr<std::unique_ptr<GradientHooks>> Install(
      const std::vector<Parameter>& parameters, std::function<void(size_t index)> ready);
  ~GradientHooks();
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

 private:
  GradientHooks() = default;

  std::function<void(size_t)> ready_;
  // Each accumulator and its hook's key (Node::del_post_hook).
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_GRADIENT_HOOKS_H_
