#include "torch_backend/device_stage.h"

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::torch_backend {
namespace {

size_t Bytes(const at::Tensor& tensor) {
  return static_cast<size_t>(tensor.numel()) * tensor.element_size();
}

}  // namespace

absl::Status DeviceStage::Stage(at::Tensor& tensor, Direction direction) {
  if (device_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool held, device_->Holds(tensor));
  if (!held) return absl::OkStatus();
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdmaflow moves contiguous device tensors; this ", tensor.device().str(),
        " tensor of shape ", c10::str(tensor.sizes()), " is not (call .contiguous() first)"));
  }
  if (direction == Direction::kOnDevice) {
    pairs_.push_back({tensor, at::Tensor(), direction});
    return absl::OkStatus();
  }
  at::Tensor host;
  try {
    at::TensorOptions options = tensor.options().device(at::kCPU);
    if (!device_->fake()) {
      // Pinned: a copy from the device into pageable memory would block.
      options = options.pinned_memory(true);
    }
    host = at::empty(tensor.sizes(), options);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating a host twin of ", Bytes(tensor), " bytes for a ", tensor.device().str(),
        " tensor: ", e.what()));
  }
  pairs_.push_back({tensor, host, direction});
  tensor = host;
  return absl::OkStatus();
}

bool DeviceStage::on_device() const { return on_device_count() > 0; }

int DeviceStage::on_device_count() const {
  int count = 0;
  for (const Pair& pair : pairs_) count += pair.direction == Direction::kOnDevice ? 1 : 0;
  return count;
}

absl::Status DeviceStage::Stage(std::vector<at::Tensor>& tensors, Direction direction) {
  for (at::Tensor& tensor : tensors) RETURN_IF_ERROR(Stage(tensor, direction));
  return absl::OkStatus();
}

size_t DeviceStage::bytes() const {
  size_t total = 0;
  for (const Pair& pair : pairs_) {
    if (pair.direction == Direction::kOnDevice) continue;
    total += Bytes(pair.device) * (pair.direction == Direction::kInOut ? 2 : 1);
  }
  return total;
}

absl::Status DeviceStage::MarkCaller() {
  if (pairs_.empty()) return absl::OkStatus();
  device::DeviceRuntime& runtime = device_->runtime();
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> caller, device_->CallerStream());
  ASSIGN_OR_RETURN(caller_, runtime.CreateEvent());
  ASSIGN_OR_RETURN(done_, runtime.CreateEvent());
  return caller->Record(*caller_);
}

absl::Status DeviceStage::CopyIn(absl::Time deadline) { return Copy(/*in=*/true, deadline); }

absl::Status DeviceStage::CopyOut(absl::Time deadline) { return Copy(/*in=*/false, deadline); }

absl::Status DeviceStage::Copy(bool in, absl::Time deadline) {
  if (pairs_.empty()) return absl::OkStatus();
  if (caller_ == nullptr) {
    return absl::FailedPreconditionError("a device stage copied before MarkCaller");
  }
  size_t bytes = 0;
  int tensors = 0;
  {
    absl::MutexLock lock(&device_->staging_mu());
    device::Stream& stream = device_->staging();
    absl::Status enqueued;
    if (!waited_for_caller_) {
      // Outputs too: the caller's stream may still use them before the call.
      enqueued = stream.WaitFor(*caller_);
      waited_for_caller_ = enqueued.ok();
    }
    for (const Pair& pair : pairs_) {
      if (!enqueued.ok()) break;
      if (pair.direction == Direction::kOnDevice ||
          pair.direction == (in ? Direction::kOut : Direction::kIn)) {
        continue;
      }
      const size_t n = Bytes(pair.device);
      if (n == 0) continue;
      enqueued = in ? stream.Copy(pair.host.data_ptr(), pair.device.data_ptr(), n)
                    : stream.Copy(pair.device.data_ptr(), pair.host.data_ptr(), n);
      bytes += n;
      ++tensors;
    }
    // With tensors on the device, their users (other streams) start once
    // the host knows the caller's stream got there.
    if (enqueued.ok() && tensors == 0 && !(in && on_device())) return absl::OkStatus();
    if (enqueued.ok()) enqueued = stream.Record(*done_);
    if (!enqueued.ok()) {
      // Some copies may be queued: the tensors stay until the stream passes
      // them (for good, when even that point cannot be marked).
      if (stream.Record(*done_).ok()) {
        Keep();
      } else {
        Leak();
      }
      device_->RenewStaging().IgnoreError();
      return enqueued;
    }
  }
  const std::string what = absl::StrCat(
      in ? "copying " : "copying back ", tensors, " device tensor(s), ", bytes, " bytes, ",
      in ? "to host memory (after the caller's stream reaches the call)"
         : "to the device");
  absl::Status done = done_->WaitUntil(deadline, what);
  if (!done.ok()) {
    Keep();
    if (!absl::IsDeadlineExceeded(done)) {
      // The stream broke: later calls get a new one.
      absl::MutexLock lock(&device_->staging_mu());
      device_->RenewStaging().IgnoreError();
    }
  }
  return done;
}

void DeviceStage::Leak() {
  auto* kept = new std::vector<Pair>(std::move(pairs_));
  (void)kept;
}

void DeviceStage::Keep() {
  std::vector<at::Tensor> tensors;
  for (const Pair& pair : pairs_) {
    tensors.push_back(pair.device);
    if (pair.host.defined()) tensors.push_back(pair.host);
  }
  device_->Park(std::move(done_), std::move(tensors));
}

}  // namespace rdmaflow::torch_backend
