// File: device_p2p.h
// -----------------------------------------------------------------------------
// DeviceP2p: point-to-point messages of device tensors between the ranks of
// one host, device to device (docs/torch.md, "Sends and receives, device to
// device"). The sender's engine sends a small message naming its tensor's
// memory (the allocation's IPC handle and the tensor's offset in it), and
// the receiver's engine maps that allocation (CUDA IPC, once per
// allocation: at most kMappingsPerPeer of each peer stay mapped, the least
// recently used closed first) and copies the tensor out of it straight
// into its own tensor on the device, then answers; the sender's Work
// completes on that answer, and its tensor is referenced until then.
//
// CUDA leaves it undefined to free exported memory while another process
// still maps it, and torch's caching allocator frees whole allocations
// (empty_cache, a retry after running out of memory) once nothing lies in
// them. So while a peer keeps an allocation of ours mapped, the sender
// keeps the last tensor it sent from it referenced (a pin: torch frees no
// allocation with a live block in it); the answer that says the peer
// closed the mapping lets it go. At most kMappingsPerPeer pins per peer.
//
// Memory that cannot be exported (torch's expandable segments, which CUDA
// maps through another kind of handle) travels in the message itself,
// copied out to the host and in again, and is counted.
//
// The messages use tags of their own above the users' (DataTag, AckTag):
// a device tensor's send pairs only with a device tensor's receive, as
// with NCCL. Each carries a sequence number its answer echoes, so an
// answer never completes another message's send.
//
// Everything a message or an answer holds is untrusted: parsed from the
// receiver's own copy (the Messenger's), checked (ParseDeviceMessage) and
// used from there; a handle in an answer is only looked up among our pins;
// the peer's memory is only ever read by the device's copy, within the
// mapping's size.
//
// Thread-compatible: the engine thread.
#ifndef RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_
#define RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_

#include <ATen/core/Tensor.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>

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
  static constexpr uint32_t kVersion = 2;
  enum Kind : uint32_t {
    kIpc = 1,     // the tensor lies at `offset` in the allocation `handle` names
    kInline = 2,  // the tensor's bytes follow the header
  };
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t kind = kIpc;
  uint64_t bytes = 0;     // the tensor's
  uint64_t offset = 0;    // kIpc: from the allocation's base
  uint64_t sequence = 0;  // the sender's, per receiving peer; echoed
  device::IpcHandle handle;
};
static_assert(sizeof(DeviceMessageHeader) == 104);

// The receiver's answer.
struct DeviceAck {
  enum Flags : uint32_t {
    // `evicted` names an allocation of the sender's this rank no longer
    // maps (its pin may go).
    kEvicted = 1,
    // The receive gave up on a copy that may still read the sender's
    // tensor (it must never be freed).
    kCopyMayRun = 2,
  };
  int32_t code = 0;  // 0, or the absl::StatusCode the receive failed with
  uint32_t flags = 0;
  uint64_t sequence = 0;  // the message's
  device::IpcHandle evicted;
};
static_assert(sizeof(DeviceAck) == 80);

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

  // The mappings a receiver keeps of one peer's allocations, and so the
  // pins a sender keeps per peer.
  static constexpr size_t kMappingsPerPeer = 8;

  // `device` must outlive it. At most `mappings_per_peer` allocations of
  // each peer stay mapped.
  explicit DeviceP2p(TensorDevice& device, size_t mappings_per_peer = kMappingsPerPeer);
  ~DeviceP2p();

  // The message that sends `bytes` of device memory at `data` (which the
  // caller's stream has finished with) to `peer`: its IPC handle and
  // offset where the allocation exports, else the bytes inline, copied out
  // by `deadline` (given up on, the copy may still run: the caller must not
  // free `data` then). Owned by the caller until the send completes.
  struct Outgoing {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
    bool inline_bytes = false;
    uint64_t sequence = 0;
    device::IpcHandle handle;  // where !inline_bytes
  };
  absl::StatusOr<Outgoing> Describe(int peer, const void* data, size_t bytes,
                                    absl::Time deadline);

  // Room for the message of a receive of `bytes`: the header and the
  // bytes inline (uninitialized; the operating system backs large ones
  // only where written).
  static Outgoing ReceiveBuffer(size_t bytes);

  // The message `got` bytes of `buffer` from `peer` into `bytes` of device
  // memory at `dst`, by `deadline`: parsed, then copied device to device
  // out of the peer's allocation (mapped once, kept), or in from the
  // message. Fills `answer` but for its code: the message's sequence, the
  // peer's allocation closed to make room, whether a copy given up on may
  // still run. Sets `*inline_bytes`. ParseDeviceMessage's errors;
  // kInvalidArgument when the tensor does not lie within the allocation;
  // OpenIpc's and the copy's errors, naming the peer. A mapping whose copy
  // failed is closed (unless the copy may still run: then never). A copy
  // given up on at `deadline` may still run: its buffer and mapping are
  // then never freed, and the caller must not free `dst` either.
  absl::Status Deliver(int peer, Outgoing& buffer, size_t got, void* dst, size_t bytes,
                       absl::Time deadline, DeviceAck& answer, bool* inline_bytes);

  // The sender's side of an answer to `sent` (sent to `peer` from
  // `tensor`), once its code is known to be OK: `tensor` pinned for the
  // allocation it was sent from, and the pin of the allocation the peer
  // closed let go. kDataLoss when the answer echoes another sequence.
  absl::Status Answered(int peer, const Outgoing& sent, const DeviceAck& answer,
                        const at::Tensor& tensor);

  // Every mapping closed (teardown, before the ranks' last barrier: the
  // peers may free their memory after it).
  void CloseMappings() { mappings_.clear(); }

  // Peers' allocations mapped so far (each once while kept), and kept now;
  // this rank's tensors pinned for peers that map their allocations.
  int64_t mappings_opened() const { return mappings_opened_; }
  size_t mappings_kept() const { return mappings_.size(); }
  size_t pinned() const { return pins_.size(); }

 private:
  struct Mapping {
    int peer = -1;
    device::IpcHandle handle;
    device::DeviceMemory memory;
  };
  // The mapping of `handle` of `peer`, opened or found (then made the most
  // recently used); `evicted` names the peer's mapping closed to make room.
  absl::StatusOr<std::list<Mapping>::iterator> Map(int peer, const device::IpcHandle& handle,
                                                   DeviceAck& answer);
  // A copy given up on may still read `mapping`: never unmapped.
  void Abandon(std::list<Mapping>::iterator mapping);

  TensorDevice& device_;
  const size_t mappings_per_peer_;
  std::list<Mapping> mappings_;  // most recently used first
  int64_t mappings_opened_ = 0;
  uint64_t collective_calls_ = 0;
  std::map<int, uint64_t> next_sequence_;
  // Per peer and allocation handle: the last tensor sent from it.
  std::map<std::pair<int, std::array<uint8_t, device::IpcHandle::kBytes>>, at::Tensor> pins_;
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_DEVICE_P2P_H_
