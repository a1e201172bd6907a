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
// gradients out (counted in the step's compute time), through page-locked
// host buffers on a GPU, the gradients all at once.
//
// A strategy that takes device parameters (Strategy::
// takes_device_parameters: allreduce, moshpit, gossip pull, ps pull=read;
// those that run the model cut in two, Strategy::runs_split(), through
// ResidentSplit(): layer_separated, allreduce overlap=forward) gets the
// copy's own parameters
// instead (Resident()): it exchanges and updates them on the device, in
// its device regions, and Compute() stages nothing; CopyToHost() brings
// the host model up to date for an evaluation. A strategy that runs the
// split with device parameters runs ResidentSplit()'s halves on them.
//
// A strategy that runs the model halves itself (layer_separated,
// allreduce overlap=forward) with host parameters: Split() gives it features
// and head that run on the device copy the same way (host tensors in and
// out, the host parameters' values in, their gradients out through hooks
// on the copy's parameters during the strategy's own backward). A model
// serves Compute() or Split(), not both.
//
//   cuda     the model on GPU 0 (LoadTorchCuda: torch's CUDA library)
//   mirror   the copy on the CPU: the same path without a GPU, for tests
//
// Thread-compatible: the worker's thread.
#ifndef RDMAFLOW_TRAIN_DEVICE_MODEL_H_
#define RDMAFLOW_TRAIN_DEVICE_MODEL_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strategies/strategy.h"
#include "train/models.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

class DeviceModel {
 public:
  // Readies `kind` for this process: for cuda, loads torch's CUDA library
  // (LoadTorchCuda). Call it before any other torch call of the process:
  // torch looks its CUDA hooks up once (torch::manual_seed, which MakeModel
  // calls, does), and a lookup made before the library was loaded sticks.
  // Errors as Create's; nothing to do for cpu and mirror.
  static absl::Status Prepare(const std::string& kind);

  // The model `name` (as MakeModel builds it, from `seed`) on `kind`, its
  // parameters paired with `host`'s in order. kUnavailable without a GPU
  // (why); kFailedPrecondition where torch was asked about CUDA before its
  // CUDA library was loaded (Prepare); kUnimplemented for a torch.export
  // model; kInvalidArgument for cpu, an unknown kind or parameters that do
  // not pair up.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Create(const std::string& kind,
                                                             const std::string& name,
                                                             uint64_t seed,
                                                             const SampleSpec& sample,
                                                             const Model& host);

  // Forward and backward of (x, y) on the device with the host
  // parameters' current values; the gradients added to theirs.
  absl::StatusOr<strategies::ComputeResult> Compute(const at::Tensor& x, const at::Tensor& y);

  // Where Compute()'s time went, summed over its calls: the parameters'
  // values in; forward and backward (up to the device's end of them: it is
  // synchronized there); the gradients and buffers out.
  struct Times {
    int64_t calls = 0;
    absl::Duration in;
    absl::Duration compute;
    absl::Duration out;
  };
  const Times& times() const { return times_; }

  // The copy's own parameters, named as the host's, for a strategy that
  // takes device parameters: from now on Compute() runs on them with
  // nothing staged (the batch in, forward and backward, the device
  // synchronized: the gradients are in the parameters' .grad(), which the
  // strategy zeroes), and the host model lags until CopyToHost().
  // kFailedPrecondition after Compute(), Split() or a first Resident().
  absl::StatusOr<std::vector<strategies::Parameter>> Resident();
  // After Resident(), for a strategy that runs the split
  // (Strategy::runs_split) with device parameters: the
  // model's features and head on the copy's own parameters (autograd
  // through both; the parameters' gradients stay in the copy's .grad()),
  // their outputs on the device (ModelSplit::device; inputs on the host
  // or the device), with no parameters_changed: the strategy updates the
  // values where they run.
  // kInvalidArgument when the model has no split; kFailedPrecondition
  // unless Resident() came first, or after a first ResidentSplit().
  absl::StatusOr<strategies::ModelSplit> ResidentSplit();
  // The copy's parameters' and buffers' values into the host model's
  // (after Resident(): before evaluating it). kInternal naming the model
  // when the device fails.
  absl::Status CopyToHost();
  bool resident() const { return use_ == Use::kResident; }

  // The model's features and head on the device, for a strategy that
  // runs the split on host parameters (ModelSplit's contract: host tensors in and out, autograd through
  // both). A part's copy takes the host parameters' values when it first
  // runs and again, in place without a version bump, at its first forward
  // or backward after the strategy said they changed
  // (ModelSplit::parameters_changed): a backward still due from an earlier
  // forward (Stanza's pipeline forwards a batch ahead) then runs, as on
  // the host, with the values of the moment it runs. The backward adds
  // the copy's gradients to the host parameters'. What they throw is the
  // strategy's to catch, as on the host. kInvalidArgument when the model has no split (`split_status`
  // says why), kFailedPrecondition after Compute() or a second Split().
  absl::StatusOr<strategies::ModelSplit> Split();

 private:
  DeviceModel() = default;
  // The features' and the head's parameters (indices), and whether their
  // copies may lag the host's values.
  struct Part {
    std::vector<size_t> parameters;
    bool stale = true;
  };
  // Gives `part`'s copies the host's values in place (past the version
  // counter, for a pending backward), if they may lag.
  void Refresh(Part& part);
  // `part_fn` of the copy on `x` (host), its result back on the host.
  at::Tensor RunPart(const std::function<at::Tensor(const at::Tensor&)>& part_fn, Part& part,
                     const at::Tensor& x);

  // Compute() after Resident(): nothing staged.
  absl::StatusOr<strategies::ComputeResult> ComputeResident(const at::Tensor& x,
                                                            const at::Tensor& y);
  // Waits for the device's work so far (nothing to wait for on mirror);
  // throws std::runtime_error for a broken device, into the callers'
  // handlers.
  void SynchronizeDevice() const;

  Part features_, head_;

  enum class Use { kNone, kCompute, kSplit, kResident };
  // The split of a model that has one, else why not.
  absl::Status CheckSplit() const;
  bool resident_split_ = false;
  Use use_ = Use::kNone;
  Times times_;

  Model model_;
  at::Device device_{at::kCPU};
  std::vector<at::Tensor> host_;    // the strategy's parameters
  std::vector<at::Tensor> copies_;  // the device copy's, in the same order
  // Compute()'s host staging of the parameters' values in and their
  // gradients out (page-locked on a GPU), in the same order.
  std::vector<at::Tensor> in_stage_;
  std::vector<at::Tensor> out_stage_;
  // Buffers (BatchNorm's running statistics), copied back after each batch
  // so that the host model evaluates as trained.
  std::vector<at::Tensor> host_buffers_;
  std::vector<at::Tensor> copy_buffers_;
};

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_DEVICE_MODEL_H_
