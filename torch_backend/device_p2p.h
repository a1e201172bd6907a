// File: device_p2p.h
// -----------------------------------------------------------------------------
// DeviceP2p: point-to-point messages of device tensors between the ranks of
// one host, device to device (docs/torch.md, "Send and receive of CUDA
// tensors"). The sender's engine sends a small message naming its tensor's
// memory (the allocation's IPC handle and the tensor's offset in it), and
// the receiver's engine maps that allocation (CUDA IPC, once per
// allocation: the mappings are kept, the least recently used dropped past
// a bound) and copies the tensor out of it straight into its own tensor on
// the device, then answers; the sender's Work completes on that answer,
// and its tensor is referenced until then. Memory that cannot be exported
// (torch's expandable segments, which CUDA maps through another kind of
// handle) travels in the message itself, copied out to the host and in
// again, and is counted.
//
// The messages use tags of their own above the users' (DataTag, AckTag):
// a device tensor's send pairs only with a device tensor's receive, as
// with NCCL.
//
// Everything a message holds is untrusted: it is parsed from the receiver's
// own copy (the Messenger's), checked (ParseDeviceMessage) and used from
// there; the peer's memory is only ever read by the device's copy, within
// the mapping's size.
//
// Thread-compatible: the engine thread.
#ifndef RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_
#define RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device/device_runtime.h"
#include "torch_backend/tensor_device.h"

namespace rdmaflow::torch_backend {

// What a device message starts with (the bytes of an inline tensor
// follow it).
struct DeviceMessageHeader {
  static constexpr uint64_t kMagic = 0x5046'4456'4550'3250;  // "P2PEVDFP"
  static constexpr uint32_t kVersion = 1;
  enum Kind : uint32_t {
    kIpc = 1,     // the tensor lies at `offset` in the allocation `handle` names
    kInline = 2,  // the tensor's bytes follow the header
  };
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t kind = kIpc;
  uint64_t bytes = 0;   // the tensor's
  uint64_t offset = 0;  // kIpc: from the allocation's base
  device::IpcHandle handle;
};
static_assert(sizeof(DeviceMessageHeader) == 96);

// The receiver's answer: 0, or the absl::StatusCode its side failed with.
struct DeviceAck {
  int32_t code = 0;
  int32_t reserved = 0;
};

// The header of `got` bytes at `message` (a copy the caller owns) from
// rank `peer`, for a receive of `expected_bytes`: checked, or
// kInvalidArgument (a message too short, another magic or version, an
// unknown kind, a size other than `expected_bytes`, inline bytes that do
// not fill the message) or kDataLoss, naming the peer.
absl::StatusOr<DeviceMessageHeader> ParseDeviceMessage(const std::byte* message, size_t got,
                                                       size_t expected_bytes, int peer);

class DeviceP2p {
 public:
  // Messenger tags of device messages and their answers, from a tag that
  // is a user's (below 2^31: UserTag) or a device collective's
  // (NextCollectiveTag: bit 59 and a sequence number), all below the
  // collectives' 2^62 (collectives/direct_collectives.h).
  static uint64_t UserTag(int tag) { return static_cast<uint64_t>(static_cast<uint32_t>(tag)); }
  static uint64_t DataTag(uint64_t tag) { return tag | (uint64_t{1} << 60); }
  static uint64_t AckTag(uint64_t tag) { return tag | (uint64_t{1} << 61); }
  // Every rank calls the device collectives in one order, so the n-th
  // call's tag is the same everywhere.
  uint64_t NextCollectiveTag() {
    return (uint64_t{1} << 59) | (collective_calls_++ & ((uint64_t{1} << 59) - 1));
  }

  // `device` must outlive it. At most `max_mappings` peers' allocations
  // stay mapped.
  explicit DeviceP2p(TensorDevice& device, size_t max_mappings = 64);
  ~DeviceP2p();

  // The message that sends `bytes` of device memory at `data` (which the
  // caller's stream has finished with): its IPC handle and offset where
  // the allocation exports, else the bytes inline, copied out by
  // `deadline` (given up on, the copy may still run: the caller must not
  // free `data` then). Owned by the caller until the send completes.
  struct Outgoing {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
    bool inline_bytes = false;
  };
  absl::StatusOr<Outgoing> Describe(const void* data, size_t bytes, absl::Time deadline);

  // Room for the message of a receive of `bytes`: the header and the
  // bytes inline (uninitialized; the operating system backs large ones
  // only where written).
  static Outgoing ReceiveBuffer(size_t bytes);

  // The message `got` bytes of `buffer` from `peer` into `bytes` of device
  // memory at `dst`, by `deadline`: parsed, then copied device to device
  // out of the peer's allocation (mapped once, kept), or in from the
  // message. Sets `*inline_bytes`. ParseDeviceMessage's errors;
  // kInvalidArgument when the tensor does not lie within the allocation;
  // OpenIpc's and the copy's errors, naming the peer.
  // A copy given up on at `deadline` may still run: its buffer and mapping
  // are then never freed, and the caller must not free `dst` either.
  absl::Status Deliver(int peer, Outgoing& buffer, size_t got, void* dst, size_t bytes,
                       absl::Time deadline, bool* inline_bytes);

  // Peers' allocations mapped so far (each once while kept), and kept now.
  int64_t mappings_opened() const { return mappings_opened_; }
  size_t mappings_kept() const { return mappings_.size(); }

 private:
  struct Mapping {
    int peer = -1;
    device::IpcHandle handle;
    device::DeviceMemory memory;
  };
  // The mapping of `handle` of `peer`, opened or found (then made the most
  // recently used).
  absl::StatusOr<const device::DeviceMemory*> Map(int peer, const device::IpcHandle& handle);

  TensorDevice& device_;
  const size_t max_mappings_;
  std::list<Mapping> mappings_;  // most recently used first
  int64_t mappings_opened_ = 0;
  uint64_t collective_calls_ = 0;
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_
