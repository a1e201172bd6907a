#include "torch_backend/tensor_device.h"

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_device.h"
#include "device/queued_work.h"

namespace rdmaflow::torch_backend {
namespace {

thread_local device::Stream* fake_current_stream = nullptr;

}  // namespace

void SetFakeCurrentStream(device::Stream* stream) { fake_current_stream = stream; }

TensorDevice::TensorDevice(std::unique_ptr<device::DeviceRuntime> runtime, bool fake, int index)
    : runtime_(std::move(runtime)), fake_(fake), index_(index) {}

TensorDevice::~TensorDevice() {
  {
    absl::MutexLock lock(&parked_mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    for (Parked& parked : parked_) {
      if (!parked.done->WaitUntil(deadline, "a copy given up on").ok()) {
        // Still running (or its stream broke): its memory is never freed.
        new std::vector<at::Tensor>(std::move(parked.tensors));
      }
    }
    parked_.clear();
  }
  absl::MutexLock lock(&staging_mu_);
  staging_.reset();  // before the runtime
}

absl::Status TensorDevice::CreateStaging() {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, runtime_->CreateStream());
  absl::MutexLock lock(&staging_mu_);
  staging_ = std::move(stream);
  return absl::OkStatus();
}

absl::Status TensorDevice::RenewStaging() {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, runtime_->CreateStream());
  staging_ = std::move(stream);
  return absl::OkStatus();
}

absl::Status TensorDevice::Copy(void* dst, const void* src, size_t bytes, absl::Time deadline,
                                const std::string& what) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, runtime_->CreateEvent());
  device::QueuedWork copy;
  {
    absl::MutexLock lock(&staging_mu_);
    absl::Status enqueued = staging_->Copy(dst, src, bytes);
    if (!enqueued.ok()) {  // nothing queued
      RenewStaging().IgnoreError();
      return enqueued;
    }
    // A Record the device refused costs only time: tried again at once (a
    // later point of the stream covers the copy), and at each look.
    if (!copy.Mark(*staging_, std::move(done)).ok()) copy.Ended().IgnoreError();
    if (copy.unmarked()) {
      // Queued all the same, with no event to say when it ended: the
      // stream's idling does, waited for with the stream held (renewed
      // under the copy, it would be lost sight of; other threads wait, at
      // most until this deadline). At the deadline the copy may still run,
      // as for any copy given up on. Ended, the stream is renewed: one
      // whose Records keep being refused would hold every later copy here.
      const absl::Status ended = copy.WaitUntil(deadline, what);
      if (!absl::IsDeadlineExceeded(ended)) RenewStaging().IgnoreError();
      return ended;
    }
  }
  absl::Status status = copy.WaitUntil(deadline, what);
  if (!status.ok() && !absl::IsDeadlineExceeded(status)) {
    absl::MutexLock lock(&staging_mu_);
    RenewStaging().IgnoreError();
  }
  return status;
}

void TensorDevice::Park(std::unique_ptr<device::Event> done, std::vector<at::Tensor> tensors) {
  Reap();
  absl::MutexLock lock(&parked_mu_);
  parked_.push_back({std::move(done), std::move(tensors)});
}

void TensorDevice::Reap() {
  absl::MutexLock lock(&parked_mu_);
  if (parked_.empty()) return;
  // What failed stays: whether a broken stream still runs the copies
  // queued after the failure is the device's business.
  std::vector<Parked> kept;
  for (Parked& parked : parked_) {
    absl::StatusOr<bool> finished = parked.done->Done();
    if (!finished.ok() || !*finished) kept.push_back(std::move(parked));
  }
  parked_ = std::move(kept);
}

absl::StatusOr<std::unique_ptr<TensorDevice>> TensorDevice::Cuda(int index) {
  absl::StatusOr<std::unique_ptr<device::CudaDevice>> cuda = device::CudaDevice::Create(index);
  if (!cuda.ok()) {
    return absl::Status(cuda.status().code(),
                        absl::StrCat("rdmaflow cannot use CUDA tensors of cuda:", index, ": ",
                                     cuda.status().message()));
  }
  std::unique_ptr<TensorDevice> device(
      new TensorDevice(*std::move(cuda), /*fake=*/false, index));
  RETURN_IF_ERROR(device->CreateStaging());
  return device;
}

absl::StatusOr<std::unique_ptr<TensorDevice>> TensorDevice::Fake(
    const device::FakeDeviceOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::FakeDevice> fake, device::FakeDevice::Create(options));
  std::unique_ptr<TensorDevice> device(
      new TensorDevice(std::move(fake), /*fake=*/true, options.device));
  RETURN_IF_ERROR(device->CreateStaging());
  return device;
}

DeviceScope::DeviceScope(TensorDevice* device)
    : DeviceScope(device == nullptr || device->fake() ? -1 : device->index()) {}

DeviceScope::DeviceScope(int cuda_index) {
  if (cuda_index < 0) return;
  const int current = TensorDevice::CurrentCudaDevice();
  if (current < 0 || current == cuda_index) return;
  try {
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    c10::impl::getDeviceGuardImpl(cuda)->setDevice(
        c10::Device(cuda, static_cast<c10::DeviceIndex>(cuda_index)));
    restore_ = current;
  } catch (const std::exception&) {
    // Our own calls select the device anyway; nothing to restore.
  }
}

DeviceScope::~DeviceScope() {
  if (restore_ < 0) return;
  // What torch's own guards do on leaving: a device without a CUDA context
  // becomes current only once torch next uses it.
  const c10::DeviceType cuda = c10::DeviceType::CUDA;
  c10::impl::getDeviceGuardImpl(cuda)->uncheckedSetDevice(
      c10::Device(cuda, static_cast<c10::DeviceIndex>(restore_)));
}

int TensorDevice::CurrentCudaDevice() {
  try {
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    if (!c10::impl::hasDeviceGuardImpl(cuda)) return -1;
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(cuda);
    if (impl->deviceCount() <= 0) return -1;
    return impl->getDevice().index();
  } catch (const std::exception&) {
    return -1;
  }
}

int TensorDevice::CudaDeviceCount() {
  try {
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    if (!c10::impl::hasDeviceGuardImpl(cuda)) return 0;
    return std::max<int>(0, c10::impl::getDeviceGuardImpl(cuda)->deviceCount());
  } catch (const std::exception&) {
    return 0;
  }
}

absl::StatusOr<bool> TensorDevice::Holds(const at::Tensor& tensor) {
  if (tensor.is_cuda()) {
    if (fake_ || tensor.device().index() != index_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a tensor on ", tensor.device().str(), " where this process group moves ",
          fake_ ? std::string("the fake device's") : absl::StrCat("cuda:", index_, "'s"),
          " tensors: one process group serves one device (torch.cuda.set_device before "
          "init_process_group)"));
    }
    return true;
  }
  if (!fake_ || !tensor.device().is_cpu() || !tensor.has_storage() ||
      tensor.storage().data() == nullptr) {
    return false;
  }
  ASSIGN_OR_RETURN(device::PointerInfo info, runtime_->Query(tensor.storage().data()));
  return info.kind == device::MemoryKind::kDevice;
}

absl::StatusOr<at::Tensor> TensorDevice::Empty(int64_t numel, at::ScalarType dtype,
                                               const std::string& what) {
  if (numel < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", numel, " elements"));
  }
  if (!fake_) {
    try {
      return at::empty({numel}, at::TensorOptions().dtype(dtype).device(
                                    c10::Device(c10::DeviceType::CUDA,
                                                static_cast<c10::DeviceIndex>(index_))));
    } catch (const std::exception& e) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": allocating ", numel, " elements of ", c10::toString(dtype), " on cuda:",
          index_, ": ", e.what()));
    }
  }
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel) * c10::elementSize(dtype));
  absl::StatusOr<device::DeviceMemory> memory = runtime_->Allocate(bytes);
  if (!memory.ok()) {
    return absl::Status(memory.status().code(),
                        absl::StrCat(what, ": allocating ", bytes, " bytes on ",
                                     runtime_->name(), ": ", memory.status().message()));
  }
  auto held = std::make_shared<device::DeviceMemory>(*std::move(memory));
  void* data = held->data();
  return at::from_blob(
      data, {numel}, [held](void*) mutable { held.reset(); }, at::TensorOptions().dtype(dtype));
}

absl::StatusOr<std::unique_ptr<device::Stream>> TensorDevice::CallerStream() {
  if (fake_) {
    if (fake_current_stream == nullptr) {
      return absl::FailedPreconditionError(
          "a fake-device tensor, but this thread named no current stream "
          "(SetFakeCurrentStream)");
    }
    return runtime_->WrapStream(fake_current_stream->native_handle());
  }
  void* native = nullptr;
  try {
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    if (!c10::impl::hasDeviceGuardImpl(cuda)) {
      return absl::FailedPreconditionError(
          "torch has no CUDA support loaded in this process (a CPU-only torch, or "
          "libtorch_cuda not loaded), so there is no current CUDA stream");
    }
    const c10::Stream stream = c10::impl::getDeviceGuardImpl(cuda)->getStream(
        c10::Device(cuda, static_cast<c10::DeviceIndex>(index_)));
    native = stream.native_handle();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("asking torch for the current stream of cuda:", index_, ": ", e.what()));
  }
  return runtime_->WrapStream(native);
}

}  // namespace rdmaflow::torch_backend
