// File: cuda_device.h
// -----------------------------------------------------------------------------
// CudaDevice: the DeviceRuntime of one CUDA device, on the CUDA runtime API
// linked statically (docs/device.md). Streams are non-blocking CUDA
// streams, events CUDA events without timing, IPC handles
// cudaIpcMemHandle_t, reductions the kernel of reduce_kernels.cu. Every
// CUDA error becomes a Status naming the call, the device and CUDA's own
// words. No CUDA header reaches its users.
//
// Thread-safe: every entry point makes its device current on the calling
// thread first.
#ifndef RDMAFLOW_DEVICE_CUDA_CUDA_DEVICE_H_
#define RDMAFLOW_DEVICE_CUDA_CUDA_DEVICE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

class CudaDevice final : public DeviceRuntime, private DeviceMemory::Owner {
 public:
  // kUnavailable when no driver answers (cudaErrorInsufficientDriver on a
  // machine without a GPU), or there is no device `device`.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int device);
  ~CudaDevice() override = default;

  std::string name() const override { return name_; }
  int device() const override { return device_; }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override;
  absl::StatusOr<PointerInfo> Query(const void* ptr) override;
  absl::Status PinHost(void* ptr, size_t bytes) override;
  absl::Status UnpinHost(void* ptr) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native) override;
  absl::StatusOr<IpcHandle> ExportIpc(const void* base) override;
  absl::StatusOr<DeviceMemory> OpenIpc(const IpcHandle& handle) override;
  // cuMemGetHandleForAddressRange over the whole host pages that hold the
  // range (the driver exports pages), which must lie in one allocation.
  absl::StatusOr<DmaBuf> ExportDmaBuf(const void* ptr, size_t bytes) override;

  // Makes this device current on the calling thread.
  absl::Status MakeCurrent() const;

 private:
  CudaDevice(int device, std::string name) : device_(device), name_(std::move(name)) {}
  void Release(void* data, size_t size) override;

  const int device_;
  const std::string name_;
  absl::Mutex mu_;
  // What Release must undo: true for an IPC mapping (closed), false for an
  // allocation (freed).
  std::map<void*, bool> held_ ABSL_GUARDED_BY(mu_);
  // How many DeviceMemory hold each IPC mapping: CUDA hands the same
  // pointer to every opening of one handle in a context, counting them
  // (each closed once), so the mapping is held until the last goes.
  std::map<void*, int> opens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_CUDA_CUDA_DEVICE_H_
