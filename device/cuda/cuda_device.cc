#include "device/cuda/cuda_device.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "device/cuda/reduce_kernels.h"

namespace rdmaflow::device {
namespace {

// A CUDA error as a Status: the call, the device, and CUDA's words.
absl::Status CudaStatus(cudaError_t error, absl::string_view what, int device) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(what, " on cuda:", device, ": ",
                                           cudaGetErrorName(error), " (",
                                           cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      return absl::InvalidArgumentError(message);
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorMapBufferObjectFailed:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// cuMemGetAddressRange from the driver, found at run time through the
// runtime: the binary links no libcuda, so it starts without a driver.
using GetAddressRange = PFN_cuMemGetAddressRange_v3020;
absl::StatusOr<GetAddressRange> AddressRangeFunction(int device) {
  static void* function = nullptr;
  static cudaError_t error = [] {
    cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 3020,
                                                     cudaEnableDefault, &found);
    if (e == cudaSuccess && found != cudaDriverEntryPointSuccess) e = cudaErrorSymbolNotFound;
    return e;
  }();
  RETURN_IF_ERROR(CudaStatus(error, "finding cuMemGetAddressRange in the driver", device));
  return reinterpret_cast<GetAddressRange>(function);
}

// cuMemGetHandleForAddressRange (CUDA 11.7), found the same way.
using GetHandleForAddressRange = PFN_cuMemGetHandleForAddressRange_v11070;
absl::StatusOr<GetHandleForAddressRange> HandleForAddressRangeFunction(int device) {
  static void* function = nullptr;
  static cudaError_t error = [] {
    cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &function,
                                                     11070, cudaEnableDefault, &found);
    if (e == cudaSuccess && found != cudaDriverEntryPointSuccess) e = cudaErrorSymbolNotFound;
    return e;
  }();
  if (error != cudaSuccess) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda:", device, ": the CUDA driver has no cuMemGetHandleForAddressRange (",
        cudaGetErrorName(error), "): exporting device memory as a dma-buf needs driver 515 or "
        "newer"));
  }
  return reinterpret_cast<GetHandleForAddressRange>(function);
}

class CudaEvent final : public Event {
 public:
  CudaEvent(const CudaDevice* runtime, cudaEvent_t event) : runtime_(runtime), event_(event) {}
  ~CudaEvent() override {
    if (runtime_->MakeCurrent().ok()) cudaEventDestroy(event_);
  }

  absl::StatusOr<bool> Done() override {
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady) return false;
    RETURN_IF_ERROR(CudaStatus(error, "cudaEventQuery", runtime_->device()));
    return true;
  }

  const CudaDevice* runtime() const { return runtime_; }
  cudaEvent_t event() const { return event_; }

 private:
  const CudaDevice* const runtime_;
  const cudaEvent_t event_;
};

class CudaStream final : public Stream {
 public:
  // `owned`: destroyed with this object (CreateStream), or someone else's
  // (WrapStream).
  CudaStream(const CudaDevice* runtime, cudaStream_t stream, bool owned = true)
      : runtime_(runtime), stream_(stream), owned_(owned) {}
  ~CudaStream() override {
    if (owned_ && runtime_->MakeCurrent().ok()) cudaStreamDestroy(stream_);
  }

  void* native_handle() const override { return stream_; }

  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(runtime_->name(), ": copy with a null pointer"));
    }
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_),
                      absl::StrCat("cudaMemcpyAsync of ", bytes, " bytes"), runtime_->device());
  }

  absl::Status Zero(void* dst, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(runtime_->name(), ": zero of a null pointer"));
    }
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    return CudaStatus(cudaMemsetAsync(dst, 0, bytes, stream_),
                      absl::StrCat("cudaMemsetAsync of ", bytes, " bytes"), runtime_->device());
  }

  absl::Status Reduce(const ReduceArgs& args) override {
    RETURN_IF_ERROR(CheckReduceArgs(args));
    if (args.count == 0) return absl::OkStatus();
    using collectives::DataType;
    const cuda::KernelType type = args.type == DataType::kFloat16    ? cuda::KernelType::kFloat16
                                  : args.type == DataType::kBFloat16 ? cuda::KernelType::kBFloat16
                                                                     : cuda::KernelType::kFloat32;
    const cuda::KernelOp op =
        args.op == collectives::ReduceOp::kSum ? cuda::KernelOp::kSum : cuda::KernelOp::kMax;
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    const int error = cuda::LaunchReduce(type, op, args.dst, args.srcs.data(),
                                         static_cast<int>(args.srcs.size()), args.count, stream_);
    return CudaStatus(static_cast<cudaError_t>(error),
                      absl::StrCat("launching the reduce kernel over ", args.count, " elements"),
                      runtime_->device());
  }

  absl::Status Record(Event& event) override {
    ASSIGN_OR_RETURN(CudaEvent * cuda, Ours(event));
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    return CudaStatus(cudaEventRecord(cuda->event(), stream_), "cudaEventRecord",
                      runtime_->device());
  }

  absl::Status WaitFor(Event& event) override {
    ASSIGN_OR_RETURN(CudaEvent * cuda, Ours(event));
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    return CudaStatus(cudaStreamWaitEvent(stream_, cuda->event(), 0), "cudaStreamWaitEvent",
                      runtime_->device());
  }

  absl::StatusOr<bool> Idle() override {
    RETURN_IF_ERROR(runtime_->MakeCurrent());
    const cudaError_t error = cudaStreamQuery(stream_);
    if (error == cudaErrorNotReady) return false;
    RETURN_IF_ERROR(CudaStatus(error, "cudaStreamQuery", runtime_->device()));
    return true;
  }

 private:
  absl::StatusOr<CudaEvent*> Ours(Event& event) {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr || cuda->runtime() != runtime_) {
      return absl::InvalidArgumentError(
          absl::StrCat("an event of another runtime used on a stream of ", runtime_->name()));
    }
    return cuda;
  }

  const CudaDevice* const runtime_;
  const cudaStream_t stream_;
  const bool owned_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int device) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA: no usable driver or device (cudaGetDeviceCount: ", cudaGetErrorName(error), ", ",
        cudaGetErrorString(error), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA: there is no device ", device, " (", count, " found)"));
  }
  cudaDeviceProp properties;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&properties, device),
                             "cudaGetDeviceProperties", device));
  std::string name = absl::StrCat("cuda:", device, " (", properties.name, ", sm_",
                                  properties.major, properties.minor, ")");
  std::unique_ptr<CudaDevice> runtime(new CudaDevice(device, std::move(name)));
  RETURN_IF_ERROR(runtime->MakeCurrent());
  return runtime;
}

absl::Status CudaDevice::MakeCurrent() const {
  return CudaStatus(cudaSetDevice(device_), "cudaSetDevice", device_);
}

absl::StatusOr<DeviceMemory> CudaDevice::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat(name_, ": allocating 0 bytes"));
  RETURN_IF_ERROR(MakeCurrent());
  void* data = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(&data, bytes), absl::StrCat("cudaMalloc of ", bytes, " bytes"), device_));
  absl::MutexLock lock(&mu_);
  held_[data] = false;
  return DeviceMemory(this, data, bytes);
}

void CudaDevice::Release(void* data, size_t) {
  bool mapped = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(data);
    if (it == held_.end()) {
      std::fprintf(stderr, "%s: releasing %p, which it does not hold\n", name_.c_str(), data);
      return;
    }
    mapped = it->second;
    // A mapping opened again stays held until its last opening goes (CUDA
    // counts the openings: each is closed).
    if (!mapped || --opens_[data] <= 0) {
      held_.erase(it);
      opens_.erase(data);
    }
  }
  absl::Status status = MakeCurrent();
  if (status.ok()) {
    status = mapped ? CudaStatus(cudaIpcCloseMemHandle(data), "cudaIpcCloseMemHandle", device_)
                    : CudaStatus(cudaFree(data), "cudaFree", device_);
  }
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
}

absl::StatusOr<PointerInfo> CudaDevice::Query(const void* ptr) {
  if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name_, ": querying null"));
  RETURN_IF_ERROR(MakeCurrent());
  cudaPointerAttributes attributes;
  RETURN_IF_ERROR(CudaStatus(cudaPointerGetAttributes(&attributes, ptr),
                             "cudaPointerGetAttributes", device_));
  PointerInfo info;
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return info;  // pageable or pinned host memory
  }
  info.kind = MemoryKind::kDevice;
  info.device = attributes.device;
  ASSIGN_OR_RETURN(GetAddressRange range, AddressRangeFunction(device_));
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult result = range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (result != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat(name_, ": cuMemGetAddressRange of ", absl::StrFormat("%p", ptr),
                                            " failed with CUresult ", static_cast<int>(result)));
  }
  info.base = reinterpret_cast<const void*>(base);
  info.size = size;
  return info;
}

absl::Status CudaDevice::PinHost(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": pinning a null or empty range"));
  }
  RETURN_IF_ERROR(MakeCurrent());
  return CudaStatus(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault),
                    absl::StrCat("cudaHostRegister of ", bytes, " bytes"), device_);
}

absl::Status CudaDevice::UnpinHost(void* ptr) {
  RETURN_IF_ERROR(MakeCurrent());
  return CudaStatus(cudaHostUnregister(ptr), "cudaHostUnregister", device_);
}

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  RETURN_IF_ERROR(MakeCurrent());
  cudaStream_t stream;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags", device_));
  return std::unique_ptr<Stream>(new CudaStream(this, stream));
}

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::WrapStream(void* native) {
  // The handle names a stream of the context, or 0 (the legacy default
  // stream): nothing to check without using it; a stream of another device
  // fails its first operation with CUDA's error.
  return std::unique_ptr<Stream>(
      new CudaStream(this, static_cast<cudaStream_t>(native), /*owned=*/false));
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  RETURN_IF_ERROR(MakeCurrent());
  cudaEvent_t event;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags", device_));
  return std::unique_ptr<Event>(new CudaEvent(this, event));
}

absl::StatusOr<IpcHandle> CudaDevice::ExportIpc(const void* base) {
  ASSIGN_OR_RETURN(PointerInfo info, Query(base));
  if (info.kind != MemoryKind::kDevice || info.base != base) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": exporting ", absl::StrFormat("%p", base),
        ", which is not the base of a device allocation (Query gives the base)"));
  }
  cudaIpcMemHandle_t handle;
  RETURN_IF_ERROR(CudaStatus(cudaIpcGetMemHandle(&handle, const_cast<void*>(base)),
                             "cudaIpcGetMemHandle", device_));
  static_assert(sizeof(handle) == IpcHandle::kBytes);
  IpcHandle out;
  std::memcpy(out.bytes.data(), &handle, sizeof(handle));
  return out;
}

absl::StatusOr<DeviceMemory> CudaDevice::OpenIpc(const IpcHandle& handle) {
  // Copied once from what the peer sent; CUDA checks the rest.
  cudaIpcMemHandle_t copy;
  std::memcpy(&copy, handle.bytes.data(), sizeof(copy));
  RETURN_IF_ERROR(MakeCurrent());
  void* data = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaIpcOpenMemHandle(&data, copy, cudaIpcMemLazyEnablePeerAccess),
                             "cudaIpcOpenMemHandle", device_));
  size_t size = 0;
  absl::StatusOr<PointerInfo> info = Query(data);
  if (info.ok()) size = info->size;
  if (!info.ok() || size == 0) {
    cudaIpcCloseMemHandle(data);
    return info.ok() ? absl::InternalError(absl::StrCat(name_, ": an opened IPC mapping has no size"))
                     : info.status();
  }
  absl::MutexLock lock(&mu_);
  held_[data] = true;
  ++opens_[data];
  return DeviceMemory(this, data, size);
}

absl::StatusOr<DmaBuf> CudaDevice::ExportDmaBuf(const void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": exporting a null or empty range as a dma-buf"));
  }
  ASSIGN_OR_RETURN(PointerInfo info, Query(ptr));
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  const auto base = reinterpret_cast<uintptr_t>(info.base);
  bool mapped = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(const_cast<void*>(info.base));
    mapped = it != held_.end() && it->second;
  }
  if (info.kind != MemoryKind::kDevice || info.device != device_ || mapped ||
      bytes > info.size - (at - base)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": exporting ", bytes, " bytes at ", absl::StrFormat("%p", ptr),
        " as a dma-buf: the range is not inside one allocation of this process on this device"));
  }
  ASSIGN_OR_RETURN(GetHandleForAddressRange get_handle, HandleForAddressRangeFunction(device_));
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = at / page * page;
  const uintptr_t end = (at + bytes + page - 1) / page * page;
  if (start < base || end > base + info.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": exporting ", bytes, " bytes at ", absl::StrFormat("%p", ptr),
        " as a dma-buf: the host pages that hold them reach outside their ", info.size,
        "-byte allocation; allocate memory for GPUDirect RDMA in whole pages"));
  }
  int fd = -1;
  const CUresult result = get_handle(&fd, static_cast<CUdeviceptr>(start), end - start,
                                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (result != CUDA_SUCCESS) {
    const std::string message =
        absl::StrCat(name_, ": cuMemGetHandleForAddressRange(DMA_BUF_FD) of ", end - start,
                     " bytes failed with CUresult ", static_cast<int>(result));
    // The driver says NOT_SUPPORTED where the device or kernel cannot
    // (dma-buf export needs Linux 5.12 or newer and the open GPU kernel
    // modules); the device attribute that said so is deprecated.
    return result == CUDA_ERROR_NOT_SUPPORTED
               ? absl::UnimplementedError(absl::StrCat(
                     message, " (not supported: dma-buf export needs Linux 5.12 or newer and "
                              "NVIDIA's open GPU kernel modules)"))
               : absl::InternalError(message);
  }
  return DmaBuf{UniqueFd(fd), at - start, bytes};
}

}  // namespace rdmaflow::device
