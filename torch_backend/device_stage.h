// File: device_stage.h
// -----------------------------------------------------------------------------
// DeviceStage: one operation's device tensors, moved through host twins
// with torch's stream semantics (docs/torch.md, "CUDA tensors"):
//
//   caller thread  Stage() swaps each device tensor of the call for a host
//                  twin (contiguous, same shape and dtype; pinned on CUDA),
//                  then MarkCaller() records an event on the caller's
//                  current stream: the call sees what that stream did
//                  before it, and never blocks the caller;
//   engine         CopyIn() before the operation: the staging stream waits
//                  for the caller's event, copies the inputs to their
//                  twins, and the engine waits (to a deadline) until they
//                  are there; the host operation then runs on the twins;
//   completion     CopyOut(): the outputs' twins back to the device tensors
//                  on the staging stream, waited for before the Work
//                  completes, so a completed Work's outputs are on the
//                  device for any stream (Work.wait() makes no stream
//                  wait, and the Future holds finished tensors).
//
// The device tensors stay referenced until the stage is destroyed (after
// the Work completes): torch's caching allocator cannot hand their memory
// to another tensor while the staging stream still copies into it.
//
// Thread-compatible: Stage/MarkCaller on the calling thread, then CopyIn and
// CopyOut on whichever thread runs the operation and completes it.
#ifndef RDMAFLOW_TORCH_BACKEND_DEVICE_STAGE_H_
#define RDMAFLOW_TORCH_BACKEND_DEVICE_STAGE_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "device/device_runtime.h"
#include "torch_backend/tensor_device.h"

namespace rdmaflow::torch_backend {

class DeviceStage {
 public:
  enum class Direction {
    kIn,     // read by the operation: copied to the host before it
    kOut,    // written by it: copied back after it
    kInOut,  // both (in-place collectives)
    // Stays on the device, where the operation uses it (DeviceAllReduce):
    // no twin; CopyIn waits until the caller's stream reached the call.
    kOnDevice,
  };

  // `device`: the group's, or null when it has none yet (then every tensor
  // must be a host tensor).
  explicit DeviceStage(TensorDevice* device) : device_(device) {}

  // A device tensor of the group's device becomes its host twin (the
  // operation then runs on `tensor` as swapped); a host tensor stays.
  // kInvalidArgument for a non-contiguous device tensor (say
  // .contiguous() first, as NCCL asks too), or one of another device.
  absl::Status Stage(at::Tensor& tensor, Direction direction);
  absl::Status Stage(std::vector<at::Tensor>& tensors, Direction direction);
  bool empty() const { return pairs_.empty(); }
  TensorDevice* device() const { return device_; }
  // Whether some tensor was staged kOnDevice; how many were.
  bool on_device() const;
  int on_device_count() const;
  // The bytes the stage moves, both ways together.
  size_t bytes() const;

  // On the calling thread, after every Stage(): where the caller's current
  // stream is. A no-op for an empty stage.
  absl::Status MarkCaller();
  // Before the operation (a no-op for an empty stage); kDeadlineExceeded
  // when the caller's stream or the copies have not got there by `deadline`.
  absl::Status CopyIn(absl::Time deadline);
  // After it succeeded.
  absl::Status CopyOut(absl::Time deadline);

 private:
  struct Pair {
    at::Tensor device;
    at::Tensor host;
    Direction direction;
  };
  // Enqueues `pairs`' copies one way (to the host when `in`) after the
  // caller's event, records `done_` and waits for it.
  absl::Status Copy(bool in, absl::Time deadline);
  // After a copy was given up on: hands the tensors to the device until
  // `done_` (or the failed stream) lets them go.
  void Keep();
  // Or never lets them go.
  void Leak();

  TensorDevice* const device_;
  std::vector<Pair> pairs_;
  std::unique_ptr<device::Event> caller_;
  std::unique_ptr<device::Event> done_;
  bool waited_for_caller_ = false;
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_DEVICE_STAGE_H_
