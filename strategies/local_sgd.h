// File: local_sgd.h
// -----------------------------------------------------------------------------
// LocalSgd: a replica that trains on its own between exchanges (gossip,
// moshpit). It moves the model's parameters into one flat float32 tensor
// (64-byte aligned, in parameter order; the parameters become views of it),
// so a whole model is exchanged or averaged as one buffer, and applies SGD
// with momentum from the parameters' own .grad (torch.optim.SGD's update).
#ifndef RDMAFLOW_STRATEGIES_LOCAL_SGD_H_
#define RDMAFLOW_STRATEGIES_LOCAL_SGD_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

// Thread-compatible.
class LocalSgd {
 public:
  // The replica on `where` (the CPU, or the device of a strategy's device
  // parameters): its flat parameters and momentum are tensors there.
  // kInvalidArgument (naming `strategy` and the parameter) for a parameter
  // that is not a float32 tensor on `where`, or for no parameters at all.
  static absl::StatusOr<std::unique_ptr<LocalSgd>> Create(
      const std::string& strategy, std::vector<Parameter> parameters,
      c10::Device where = c10::Device(c10::DeviceType::CPU));

  // The parameters, flat (padding between them is zero).
  at::Tensor& flat() { return flat_; }
  size_t bytes() const { return bytes_; }

  void ZeroGradients();
  // v = momentum * v + g; p -= lr * v, for every parameter with a gradient.
  void Step(double learning_rate, double momentum);

 private:
  LocalSgd() = default;
  std::vector<Parameter> parameters_;
  std::vector<size_t> offsets_;  // elements
  size_t bytes_ = 0;
  at::Tensor flat_;
  at::Tensor momentum_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_LOCAL_SGD_H_
