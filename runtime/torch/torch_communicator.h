// File: torch_communicator.h
// -----------------------------------------------------------------------------
// TorchCommunicator: LibTorch tensors over any Communicator. Send keeps the
// tensor alive until the transfer no longer reads it (a tensor from
// RegisteredAllocator goes out with no copy); Recv returns an at::Tensor
// that, on the zero-copy path, is a view (from_blob) of the receive slot and
// gives the slot back to the sender when the last reference to it drops.
// The only place LibTorch meets the runtime: c10::Error is caught here and
// returned as a Status.
#ifndef RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_
#define RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_

#include <ATen/core/Tensor.h>

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
  // kInvalidArgument as RankPlan::Create.
  static absl::StatusOr<TorchCommunicator> Create(
      Communicator& communicator, const plan::TransferPlan& plan, int rank);

  // kInvalidArgument for a tensor not on the CPU or of another dtype than
  // the plan's; a non-contiguous tensor is made contiguous first (a copy).
  absl::Status Send(int id, const at::Tensor& tensor);
  absl::StatusOr<at::Tensor> Recv(int id);
  absl::Status FinishStep() { return communicator_->FinishStep(); }

  Communicator& communicator() { return *communicator_; }

 private:
  TorchCommunicator(Communicator& communicator, RankPlan plan)
      : communicator_(&communicator), plan_(std::move(plan)) {}

  Communicator* communicator_;
  RankPlan plan_;
};

}  // namespace rdmaflow::runtime::torch

#endif  // RDMAFLOW_RUNTIME_TORCH_TORCH_COMMUNICATOR_H_
