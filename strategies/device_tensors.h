// File: device_tensors.h
// -----------------------------------------------------------------------------
// The torch side of a strategy's device parameters (StrategyContext::
// device): which torch device their tensors are on, waits for the work
// torch queued on it (the whole device, one thread's stream, or a mark of
// one stream), and a stream of its own for a background thread. A
// strategy hands device memory to its transport's device work (an
// all-reduce group's copies and reductions, on streams of their own) only
// once torch's kernels that wrote it are complete.
#ifndef RDMAFLOW_STRATEGIES_DEVICE_TENSORS_H_
#define RDMAFLOW_STRATEGIES_DEVICE_TENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "c10/core/Event.h"
#include "c10/core/Stream.h"
#include "c10/core/StreamGuard.h"
#include "strategies/strategy.h"

namespace rdmaflow::rdma::device_path {
class DeviceTransport;
}  // namespace rdmaflow::rdma::device_path

namespace rdmaflow::strategies {

// Where tensors over `device`'s memory live: CUDA device runtime().device()
// of a GPU's runtime; the CPU for the fake device (its memory is host
// shared memory) and for no device (null).
c10::Device TensorDeviceOf(rdma::device_path::DeviceTransport* device);

// OK when every parameter is a float32 tensor on `where`; else
// kInvalidArgument naming `who`, the parameter, and what it is.
absl::Status CheckParametersOn(const std::string& who, const std::vector<Parameter>& parameters,
                               const c10::Device& where);

// `elements` float32 values at `data` (a region's memory on `where`: a
// device region's on its device) as a tensor that does not own them.
at::Tensor FloatsOver(std::byte* data, int64_t elements, const c10::Device& where);

// A mark of the work torch has queued so far on `device`'s current stream
// (the calling thread's): a poll that is true once that work is complete
// (a device event), or null on the CPU, where nothing is queued.
// kInternal with torch's reason when the event cannot be recorded.
absl::StatusOr<std::function<absl::StatusOr<bool>()>> MarkTorchWork(const c10::Device& device);

// Waits until the work torch queued on `device` is complete (every stream
// of a CUDA device); nothing to wait for on the CPU. kInternal with torch's
// reason for a broken device.
absl::Status SynchronizeTorchDevice(const c10::Device& device);

// Waits until the work torch queued on `device`'s current stream (the
// calling thread's) is complete: not other streams' (another thread's
// forward and backward). Nothing on the CPU. kInternal as above.
absl::Status SynchronizeTorchStream(const c10::Device& device);

// Torch's work handed from one thread to another that runs its own on a
// stream of its own, so that its waits (for its own stream) are not for
// the other thread's kernels (a background round during the next step's
// compute; a cudaMalloc or cudaFree in it still waits for the device, and
// torch's pool hands its streams round robin, so one may be shared). On a
// CUDA device:
// Mark() on the handing thread records where its current stream is;
// Enter() on the receiving thread makes a stream of torch's pool (the same
// one each time) its current one for the guard's life, and that stream
// first waits, on the device, for the last mark. On the CPU, where nothing
// is queued, both do nothing (Enter() gives a null guard).
// Thread-compatible: Mark() and Enter() never run at once.
class SideStream {
 public:
  explicit SideStream(const c10::Device& device) : device_(device) {}

  // kInternal with torch's reason.
  absl::Status Mark();
  absl::StatusOr<std::unique_ptr<c10::StreamGuard>> Enter();

 private:
  const c10::Device device_;
  std::unique_ptr<c10::Event> mark_;
  std::optional<c10::Stream> stream_;  // from the pool, at the first Enter()
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_DEVICE_TENSORS_H_
