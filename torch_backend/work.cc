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
    : c10d::Work(rank, type), outputs_(std::move(outputs)) {
  if (!devices.empty()) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(),
                                                       std::move(devices));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> RdmaflowWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mu_);
  if (future_ == nullptr) {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    // Completed already: settled here, before anyone can chain on it (no
    // callback runs under the lock).
    if (done_) Settle(*future, error_);
    future_ = std::move(future);
  }
  return future_;
}

void RdmaflowWork::Complete(const absl::Status& completed) {
  if (completing_.exchange(true)) return;
  absl::Status status = completed;
  std::function<absl::Status()> before = std::move(finish_);
  finish_ = nullptr;
  if (status.ok() && before) status = before();
  before = nullptr;  // the stage's tensors go now, not with the Work
  std::exception_ptr error;
  if (!status.ok()) {
    error = std::make_exception_ptr(
        std::runtime_error("rdmaflow: " + std::string(status.ToString())));
  }
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    done_ = true;
    error_ = error;
    future = future_;
  }
  // Outside the lock: completing runs the Future's callbacks.
  if (future != nullptr) error = Settle(*future, error);
  finish(error);
}

std::exception_ptr RdmaflowWork::Settle(c10::ivalue::Future& future,
                                        std::exception_ptr error) {
  if (error != nullptr) {
    future.setError(error);
    return error;
  }
  try {
    // With CUDA outputs the Future records an event on this thread's
    // current stream: a pool stream's, idle, rather than the legacy
    // default stream, which would make its users wait for unrelated work.
    // The outputs are on the device already (DeviceStage).
    c10::OptionalStreamGuard guard;
    const std::vector<c10::Device>& devices = future.devices();
    if (!devices.empty() && c10::impl::hasDeviceGuardImpl(devices[0].type())) {
      guard.reset_stream(c10::impl::getDeviceGuardImpl(devices[0].type())
                             ->getStreamFromGlobalPool(devices[0]));
    }
    future.markCompleted(c10::IValue(outputs_));
  } catch (const std::exception& e) {
    std::exception_ptr failed = std::make_exception_ptr(std::runtime_error(
        std::string("rdmaflow: completing the Work's Future: ") + e.what()));
    if (!future.completed()) future.setError(failed);
    return failed;
  }
  // markCompleted sets some errors on the Future itself (its tensors'
  // storages): the Work then fails with the same error.
  return future.hasError() ? future.exception_ptr() : nullptr;
}

}  // namespace rdmaflow::torch_backend
