#include "torch_backend/work.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

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
    try {
      // With CUDA outputs the Future records an event on this thread's
      // current stream: a pool stream's, idle, rather than the legacy
      // default stream, which would make its users wait for unrelated work.
      // The outputs are on the device already (DeviceStage).
      c10::OptionalStreamGuard guard;
      const std::vector<c10::Device>& devices = future_->devices();
      if (!devices.empty() && c10::impl::hasDeviceGuardImpl(devices[0].type())) {
        guard.reset_stream(c10::impl::getDeviceGuardImpl(devices[0].type())
                               ->getStreamFromGlobalPool(devices[0]));
      }
      future_->markCompleted(c10::IValue(outputs_));
    } catch (const std::exception& e) {
      std::exception_ptr error = std::make_exception_ptr(std::runtime_error(
          std::string("rdmaflow: completing the Work's Future: ") + e.what()));
      if (!future_->completed()) future_->setError(error);
      finish(error);
      return;
    }
    // markCompleted sets some errors on the Future itself (its tensors'
    // storages): the Work then fails with the same error.
    finish(future_->hasError() ? future_->exception_ptr() : nullptr);
    return;
  }
  std::exception_ptr error = std::make_exception_ptr(std::runtime_error(
      "rdmaflow: " + std::string(status.ToString())));
  future_->setError(error);
  finish(error);
}

}  // namespace rdmaflow::torch_backend
