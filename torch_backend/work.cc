#include "torch_backend/work.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace rdmaflow::torch_backend {

RdmaflowWork::RdmaflowWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                           std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))) {}

void RdmaflowWork::Complete(const absl::Status& completed) {
  if (completing_.exchange(true)) return;
  absl::Status status = completed;
  std::function<absl::Status()> before = std::move(finish_);
  finish_ = nullptr;
  if (status.ok() && before) status = before();
  before = nullptr;  // the stage's tensors go now, not with the Work
  if (status.ok()) {
    finish();
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  std::exception_ptr error = std::make_exception_ptr(std::runtime_error(
      "rdmaflow: " + std::string(status.ToString())));
  finish(error);
  future_->setError(error);
}

}  // namespace rdmaflow::torch_backend
