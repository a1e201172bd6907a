// File: work.h
// -----------------------------------------------------------------------------
// RdmaflowWork: the c10d::Work of one operation of the rdmaflow backend. The
// backend's engine thread completes it; wait() then returns (or rethrows the
// operation's error, as every c10d backend does), and its Future, which
// DistributedDataParallel's communication hooks chain on, holds the output
// tensors or the error.
#ifndef RDMAFLOW_TORCH_BACKEND_WORK_H_
#define RDMAFLOW_TORCH_BACKEND_WORK_H_

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/status.h"

namespace rdmaflow::torch_backend {

// Thread-safe.
class RdmaflowWork final : public c10d::Work {
 public:
  // `devices`: the devices of the outputs' tensors other than the CPU (the
  // Future records its events there, as torch asks of a Future that holds
  // CUDA tensors).
  RdmaflowWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
               std::vector<c10::Device> devices = {});

  // Runs before a successful Complete() marks the Work done (the device
  // stage's copy back); its error completes the Work instead. Set before
  // the Work is handed to the engine; dropped once the Work completes.
  void SetFinish(std::function<absl::Status()> finish) { finish_ = std::move(finish); }

  // Completes the operation: OK, or an error that wait() rethrows as a
  // RuntimeError carrying the status message. Only the first call counts.
  void Complete(const absl::Status& status);

  std::vector<at::Tensor> result() override { return outputs_; }
  // The Work's Future (what DDP's communication hooks chain on), completed
  // with the outputs or the error once the Work is. Made at construction
  // for device outputs (it records its events on their device), else on
  // the first call: a caller that only waits (dist.all_reduce) never pays
  // for one.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // Completes `future` with the outputs, or `error`; returns the error the
  // Work ends with (completing the outputs can fail too).
  std::exception_ptr Settle(c10::ivalue::Future& future, std::exception_ptr error);

  const std::vector<at::Tensor> outputs_;
  std::atomic<bool> completing_{false};
  std::function<absl::Status()> finish_;
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by future_mu_
  bool done_ = false;                               // guarded by future_mu_
  std::exception_ptr error_;                        // guarded by future_mu_
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_WORK_H_
