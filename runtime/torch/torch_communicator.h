// File: torch_communicator.h
// -----------------------------------------------------------------------------
// TorchCommunicator: LibTorch tensors over any Communicator. Send keeps the
// tensor alive until the transfer no longer reads it (a tensor from
// RegisteredAllocator goes out with no copy); Recv returns an at::Tensor
// that, on the zero-copy path, is a view (from_blob) of the receive slot and
// gives the slot back to the sender when the last reference to it drops.
// Given the torch device whose tensors lie over the transport's device
// memory (`device`: a CUDA device, or the CPU for the fake device), it also
// moves the plan's device tensors (docs/device.md, "Device slots in the
// plan"): a device-held tensor goes out from where it lies, which must be
// inside a send arena in device memory (Communicator::AddSendArena), and a
// device slot arrives as a tensor on `device` over the slot.
// The only place LibTorch meets the runtime: c10::Error is caught here and
// returned as a Status.
#ifndef RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_
#define RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_

#include <ATen/core/Tensor.h>

#include <optional>

#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/plan.pb.h"
#include "runtime/communicator.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime::torch {

// The LibTorch dtype of a graph dtype; kInvalidArgument for one LibTorch
// lacks.
absl::StatusOr<at::ScalarType> ToScalarType(graph::DataType dtype);

// Thread-compatible, like the Communicator it wraps (which must outlive it).
class TorchCommunicator {
 public:
  // kInvalidArgument as RankPlan::Create. Without `device`, a transfer
  // the plan keeps in device memory at either end is refused
  // (kUnimplemented) when sent or received.
  static absl::StatusOr<TorchCommunicator> Create(
      Communicator& communicator, const plan::TransferPlan& plan, int rank,
      std::optional<c10::Device> device = std::nullopt);

  // A host-held transfer: kInvalidArgument for a tensor not on the CPU or
  // of another dtype than the plan's; a non-contiguous tensor is made
  // contiguous first (a copy). A device-held one: kInvalidArgument for a
  // tensor not on `device`, of another dtype, or not contiguous (a copy
  // would leave the send arena); the device work that wrote it must be
  // complete (the transport's copies do not wait for torch's streams), and
  // the communicator refuses it outside every send arena.
  absl::Status Send(int id, const at::Tensor& tensor);
  // A device slot arrives as a tensor on `device` over the slot. The slot
  // goes back to the sender when the tensor's last reference drops: the
  // device work reading it must be complete by then (synchronize torch's
  // stream before dropping it).
  absl::StatusOr<at::Tensor> Recv(int id);
  absl::Status FinishStep() { return communicator_->FinishStep(); }

  Communicator& communicator() { return *communicator_; }

 private:
  TorchCommunicator(Communicator& communicator, RankPlan plan,
                    std::optional<c10::Device> device)
      : communicator_(&communicator), plan_(std::move(plan)), device_(device) {}

  Communicator* communicator_;
  RankPlan plan_;
  std::optional<c10::Device> device_;  // over device memory; none: host only
};

}  // namespace rdmaflow::runtime::torch

#endif  // RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_
