// File: device_model.h
// -----------------------------------------------------------------------------
// DeviceModel: a worker's forward and backward on a device (rdmaflow_train
// --device cuda) while the strategy exchanges the model's parameters and
// gradients where it always does, in host memory: a second copy of the
// model on the device takes the parameters' values before each batch
// (host to device), trains on the batch there, and adds its gradients to
// the host parameters' .grad() (device to host), as a host step would have
// accumulated them. The strategies then run unchanged.
//
// This is the staged form: every step moves the parameters in and the
// gradients out (counted in the step's compute time). Device slots for the
// strategies' tensors (docs/device.md, "Device slots in the plan") are
// issue 44's next step.
//
//   cuda     the model on GPU 0 (LoadTorchCuda: torch's CUDA library)
//   mirror   the copy on the CPU: the same path without a GPU, for tests
//
// Thread-compatible: the worker's thread.
#ifndef RDMAFLOW_TRAIN_DEVICE_MODEL_H_
#define RDMAFLOW_TRAIN_DEVICE_MODEL_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strategies/strategy.h"
#include "train/models.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

class DeviceModel {
 public:
  // The model `name` (as MakeModel builds it, from `seed`) on `kind`, its
  // parameters paired with `host`'s in order. kUnavailable without a GPU
  // (why); kUnimplemented for a torch.export model; kInvalidArgument for an
  // unknown kind or parameters that do not pair up.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Create(const std::string& kind,
                                                             const std::string& name,
                                                             uint64_t seed,
                                                             const SampleSpec& sample,
                                                             const Model& host);

  // Forward and backward of (x, y) on the device with the host
  // parameters' current values; the gradients added to theirs.
  absl::StatusOr<strategies::ComputeResult> Compute(const at::Tensor& x, const at::Tensor& y);

 private:
  DeviceModel() = default;

  Model model_;
  at::Device device_{at::kCPU};
  std::vector<at::Tensor> host_;    // the strategy's parameters
  std::vector<at::Tensor> copies_;  // the device copy's, in the same order
  // Buffers (BatchNorm's running statistics), copied back after each batch
  // so that the host model evaluates as trained.
  std::vector<at::Tensor> host_buffers_;
  std::vector<at::Tensor> copy_buffers_;
};

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_DEVICE_MODEL_H_
