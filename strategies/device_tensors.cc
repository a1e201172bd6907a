// File: device_tensors.cc
#include "strategies/device_tensors.h"

#include <exception>
#include <memory>

#include "ATen/ops/from_blob.h"
#include "absl/strings/str_cat.h"
#include "c10/core/Event.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "device/fake/fake_device.h"
#include "rdma/device/device_transport.h"
#include "strategies/exception_text.h"

namespace rdmaflow::strategies {

c10::Device TensorDeviceOf(rdma::device_path::DeviceTransport* device) {
  if (device == nullptr ||
      dynamic_cast<const device::FakeDevice*>(&device->runtime()) != nullptr) {
    return c10::Device(c10::DeviceType::CPU);
  }
  return c10::Device(c10::DeviceType::CUDA,
                     static_cast<c10::DeviceIndex>(device->runtime().device()));
}

absl::Status CheckParametersOn(const std::string& who, const std::vector<Parameter>& parameters,
                               const c10::Device& where) {
  for (const Parameter& p : parameters) {
    if (p.tensor.scalar_type() != at::kFloat || p.tensor.device() != where) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": parameter '", p.name, "' is a ", c10::toString(p.tensor.scalar_type()),
          " tensor on ", p.tensor.device().str(), "; it takes float32 tensors on ", where.str()));
    }
  }
  return absl::OkStatus();
}

at::Tensor FloatsOver(std::byte* data, int64_t elements, const c10::Device& where) {
  return at::from_blob(data, {elements}, at::TensorOptions().dtype(at::kFloat).device(where));
}

absl::StatusOr<std::function<absl::StatusOr<bool>()>> MarkTorchWork(const c10::Device& device) {
  if (!device.is_cuda()) return std::function<absl::StatusOr<bool>()>();
  try {
    auto event = std::make_shared<c10::Event>(device.type());
    event->record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    return std::function<absl::StatusOr<bool>()>([event]() -> absl::StatusOr<bool> {
      try {
        return event->query();
      } catch (const std::exception& e) {
        return absl::InternalError(absl::StrCat("a device event: ", ExceptionText(e)));
      }
    });
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("recording an event on ", device.str(), ": ",
                                            ExceptionText(e)));
  }
}

absl::Status SynchronizeTorchDevice(const c10::Device& device) {
  if (!device.is_cuda()) return absl::OkStatus();
  try {
    c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("waiting for torch's work on ", device.str(), ": ",
                                            ExceptionText(e)));
  }
}

absl::Status SynchronizeTorchStream(const c10::Device& device) {
  if (!device.is_cuda()) return absl::OkStatus();
  try {
    c10::impl::getDeviceGuardImpl(device.type())->getStream(device).synchronize();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("waiting for torch's work on ", device.str(),
                                            "'s current stream: ", ExceptionText(e)));
  }
}

absl::Status SideStream::Mark() {
  if (!device_.is_cuda()) return absl::OkStatus();
  try {
    if (mark_ == nullptr) mark_ = std::make_unique<c10::Event>(device_.type());
    mark_->record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("marking torch's work on ", device_.str(),
                                            " for another thread: ", ExceptionText(e)));
  }
}

absl::StatusOr<std::unique_ptr<c10::StreamGuard>> SideStream::Enter() {
  if (!device_.is_cuda()) return std::unique_ptr<c10::StreamGuard>();
  try {
    if (!stream_.has_value()) {
      stream_ = c10::impl::getDeviceGuardImpl(device_.type())->getStreamFromGlobalPool(device_);
    }
    if (mark_ != nullptr) mark_->block(*stream_);
    return std::make_unique<c10::StreamGuard>(*stream_);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("a stream of its own on ", device_.str(), ": ",
                                            ExceptionText(e)));
  }
}

}  // namespace rdmaflow::strategies
