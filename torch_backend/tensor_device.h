// File: tensor_device.h
// -----------------------------------------------------------------------------
// TensorDevice: the device a process group's device tensors live on, as the
// backend sees it (docs/torch.md, "CUDA tensors"): which tensors are device
// tensors, the caller's current stream, and the stream the backend's own
// copies run on.
//
//   CUDA   tensors with is_cuda() on the group's one device (the first CUDA
//          tensor's, as NCCL takes one GPU per rank); the caller's stream is
//          torch's current stream of that device (found through c10's
//          device-generic interface, so no CUDA header is needed here).
//   fake   (tests on machines without a GPU: RDMAFLOW_DEVICE=fake) CPU
//          tensors whose memory the fake device holds (at::from_blob over
//          its allocations); the caller's stream is the one the calling
//          thread named with SetFakeCurrentStream, since torch knows no
//          stream of a CPU tensor.
//
// Thread-safe.
#ifndef RDMAFLOW_TORCH_BACKEND_TENSOR_DEVICE_H_
#define RDMAFLOW_TORCH_BACKEND_TENSOR_DEVICE_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device/device_runtime.h"
#include "device/fake/fake_device.h"

namespace rdmaflow::torch_backend {

class TensorDevice {
 public:
  // CUDA device `index`: kUnavailable where CUDA does not start (no driver),
  // with CUDA's reason.
  static absl::StatusOr<std::unique_ptr<TensorDevice>> Cuda(int index);
  static absl::StatusOr<std::unique_ptr<TensorDevice>> Fake(
      const device::FakeDeviceOptions& options = {});
  // Torch's current CUDA device in this process, or -1 when torch has no
  // CUDA loaded (libtorch_cpu alone) or sees no device.
  static int CurrentCudaDevice();
  // How many CUDA devices torch sees (0 without CUDA).
  static int CudaDeviceCount();
  ~TensorDevice();

  bool fake() const { return fake_; }
  // The CUDA device's ordinal (the fake device's too).
  int index() const { return index_; }
  device::DeviceRuntime& runtime() { return *runtime_; }

  // Whether `tensor` (defined, strided) is a tensor of this device. A CUDA
  // tensor of another device, or any CUDA tensor beside the fake device,
  // is kInvalidArgument: a group moves one device's tensors.
  absl::StatusOr<bool> Holds(const at::Tensor& tensor);

  // An uninitialized contiguous tensor of `numel` elements of `dtype` on
  // this device: CUDA, from torch's caching allocator (the calling
  // thread's current stream); the fake device, one allocation of its own,
  // freed with the tensor, which must not outlive this device.
  // kResourceExhausted (CUDA out of memory) or the runtime's error, naming
  // `what`.
  absl::StatusOr<at::Tensor> Empty(int64_t numel, at::ScalarType dtype, const std::string& what);

  // The calling thread's current stream on this device, not owned. The
  // fake device: kFailedPrecondition when the thread named none.
  absl::StatusOr<std::unique_ptr<device::Stream>> CallerStream();

  // The stream the backend's copies run on, and the lock its users hold
  // while they enqueue (a stream takes one enqueuer at a time).
  absl::Mutex& staging_mu() ABSL_LOCK_RETURNED(staging_mu_) { return staging_mu_; }
  device::Stream& staging() ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_) { return *staging_; }
  // After a copy failed on the staging stream (which stays broken, as
  // CUDA's sticky errors do): a new stream for the calls after it. The old
  // one finishes what it holds before it goes.
  absl::Status RenewStaging() ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_);
  // Copies `bytes` from `src` to `dst` on the staging stream and waits
  // until done: kDeadlineExceeded naming `what` at `deadline` (the copy
  // may still run: the caller keeps its memory). Any other error: the copy
  // did not run or has ended. A Record the device refused after the copy
  // was queued is no error: the copy is waited out through the stream.
  absl::Status Copy(void* dst, const void* src, size_t bytes, absl::Time deadline,
                    const std::string& what) ABSL_LOCKS_EXCLUDED(staging_mu_);
  // Keeps `tensors` until `done` completes: copies given up on at their
  // deadline still run, and must not land in memory handed to another
  // tensor. Reaped by later calls; at destruction, waited for a little,
  // then leaked rather than freed under a running copy.
  void Park(std::unique_ptr<device::Event> done, std::vector<at::Tensor> tensors)
      ABSL_LOCKS_EXCLUDED(parked_mu_);
  // Lets go of parked tensors whose copies finished (each call's stage
  // does, and Park).
  void Reap() ABSL_LOCKS_EXCLUDED(parked_mu_);

 private:
  TensorDevice(std::unique_ptr<device::DeviceRuntime> runtime, bool fake, int index);
  absl::Status CreateStaging();

  std::unique_ptr<device::DeviceRuntime> runtime_;
  const bool fake_;
  const int index_;
  absl::Mutex staging_mu_;
  std::unique_ptr<device::Stream> staging_ ABSL_GUARDED_BY(staging_mu_);
  struct Parked {
    std::unique_ptr<device::Event> done;
    std::vector<at::Tensor> tensors;
  };
  absl::Mutex parked_mu_;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(parked_mu_);
};

// While it lives, torch's current CUDA device on this thread is `device`'s
// (null, or the fake device: nothing changes), and then what it was: the
// CUDA runtime calls on the caller's thread select the group's device, and
// the caller's own current device must come back (as torch's guards bring
// it back: lazily where it has no CUDA context yet, so none is made).
class DeviceScope {
 public:
  explicit DeviceScope(TensorDevice* device);
  // The same for cuda:`cuda_index` (a CUDA tensor's device, before the
  // group has made its own).
  explicit DeviceScope(int cuda_index);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int restore_ = -1;
};

// The fake device's "current stream" of the calling thread (null: none),
// as torch.cuda.set_stream sets a CUDA one: what CallerStream() wraps. The
// stream must outlive its use.
void SetFakeCurrentStream(device::Stream* stream);

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_TENSOR_DEVICE_H_
