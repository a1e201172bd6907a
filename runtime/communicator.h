// File: communicator.h
// -----------------------------------------------------------------------------
// Communicator: what a training step sees of the network. Tensors are named
// by the id of their TensorSlot in the TransferPlan; each step the sender
// calls Send(id, ...) once and the receiver Recv(id) once, for every transfer
// of the plan that touches its rank, then both call FinishStep().
//
// Three implementations share this interface so that ablations compare like
// with like (communicator_factory.h): "rdma" (the zero-copy executor,
// executor.h), "rdma_copy" (two-sided messages with serialization and a copy
// on each side over the same fabric) and "grpc" (protobuf over gRPC
// streaming, as TensorFlow's default runtime did).
#ifndef RDMAFLOW_RUNTIME_COMMUNICATOR_H_
#define RDMAFLOW_RUNTIME_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/memory_region.h"
#include "runtime/counters.h"

namespace rdmaflow::runtime {

// A tensor handed to Send(): `bytes` at `data`, of `shape` (the element type
// is the plan's). `keepalive` is dropped once `data` may be reused (when the
// transfer no longer reads it); the caller must not modify the bytes before.
// Value type.
struct OutgoingTensor {
  const std::byte* data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape;
  std::shared_ptr<const void> keepalive;
};

// A received tensor. The bytes stay valid, and the memory they live in stays
// reserved for this tensor, until the ReceivedTensor is destroyed; on the
// zero-copy path they are the receive slot itself, and destroying the tensor
// returns the slot to the sender. Move-only; may be destroyed on any thread
// (the release is a lock-free hand-off to the communicator's progress
// engine), also after the communicator is gone.
class ReceivedTensor {
 public:
  // What keeps the bytes alive; its destructor releases them.
  class Lease {
   public:
    virtual ~Lease() = default;
  };

  ReceivedTensor() = default;
  ReceivedTensor(std::byte* data, size_t bytes, std::vector<int64_t> shape,
                 std::unique_ptr<Lease> lease, bool on_device = false)
      : data_(data),
        bytes_(bytes),
        on_device_(on_device),
        shape_(std::move(shape)),
        lease_(std::move(lease)) {}
  ReceivedTensor(ReceivedTensor&&) = default;
  ReceivedTensor& operator=(ReceivedTensor&&) = default;
  ReceivedTensor(const ReceivedTensor&) = delete;
  ReceivedTensor& operator=(const ReceivedTensor&) = delete;

  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // data() is device memory (a device slot: docs/device.md), for device
  // work only, never host loads and stores.
  bool on_device() const { return on_device_; }
  const std::vector<int64_t>& shape() const { return shape_; }

  // Hands the lease to a new owner (e.g. a LibTorch deleter); the tensor is
  // empty afterwards.
  std::unique_ptr<Lease> ReleaseLease() {
    data_ = nullptr;
    bytes_ = 0;
    return std::move(lease_);
  }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  bool on_device_ = false;
  std::vector<int64_t> shape_;
  std::unique_ptr<Lease> lease_;
};

// Thread-compatible: one thread at a time calls the methods, and it drives
// the communicator's progress (the calls progress while they wait).
// CommunicatorOptions::lockstep = false lifts the once-per-step rule below:
// each transfer then runs at its own pace.
// Errors (every message names the tensor, its id and the peer rank; the
// argument checks are shared by every implementation: communicator_checks.h):
//   kInvalidArgument: an unknown id, an id this rank does not send (receive),
//     a tensor of the wrong size or shape for its slot, a dynamic tensor
//     larger than CommunicatorOptions::dynamic_pool_bytes.
//   kDeadlineExceeded: the peer did not deliver, or did not release a slot,
//     within the communicator's timeout.
//   kUnavailable: the peer died or became unreachable.
//   kFailedPrecondition: a step with missing or repeated Send/Recv calls, or a
//     call after Shutdown().
class Communicator {
 public:
  virtual ~Communicator() = default;

  // "rdma", "rdma_copy" or "grpc".
  virtual std::string name() const = 0;

  // Starts moving `tensor` to the receiver of transfer `id`. Returns once the
  // transfer is under way; may wait (progressing) while the receiver still
  // holds the slot this step needs (flow control).
  virtual absl::Status Send(int id, OutgoingTensor tensor) = 0;

  // Waits for this step's tensor of transfer `id`.
  virtual absl::StatusOr<ReceivedTensor> Recv(int id) = 0;

  // Memory, registered with the communicator's transport, that tensors
  // handed to Send() may lie in: the zero-copy communicator ("rdma")
  // writes a tensor lying wholly inside it in place, without staging; the
  // others copy every tensor and ignore it. Must outlive the communicator.
  virtual void AddSendArena(const rdma::MemoryRegion* region) {}
  // Whether AddSendArena() changes anything: true where tensors lying in an
  // arena are sent in place (so a caller may build them there).
  virtual bool SendsInPlace() const { return false; }

  // Waits (progressing) until no transfer reads the bytes of a tensor
  // handed to Send() so far: every keepalive was dropped, and the caller
  // may write the memory again. Errors: kDeadlineExceeded after the
  // communicator's timeout, naming what still sends; a failed transfer's.
  virtual absl::Status WaitSendsDone() = 0;

  // Makes progress without waiting, then says whether Recv(id) would return
  // at once (the next tensor of `id` has arrived). For servers that take
  // whichever peer's tensor comes first. Recv's errors.
  virtual absl::StatusOr<bool> Ready(int id) = 0;

  // Ends a step: checks every transfer of this rank was sent or received
  // exactly once in it.
  virtual absl::Status FinishStep() = 0;

  // Completes what is in flight, returns the slots of dropped tensors to
  // their senders, and waits for every rank to get here. Idempotent; the
  // destructor calls it and logs a failure.
  virtual absl::Status Shutdown() = 0;

  virtual TransferCounters counters() const = 0;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_COMMUNICATOR_H_
