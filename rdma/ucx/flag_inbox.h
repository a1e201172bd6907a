// File: flag_inbox.h
// -----------------------------------------------------------------------------
// Flag notifications over shared memory: how a notified write to a same-host
// peer tells it "your bytes are there" without an active message. Each UCX
// transport allocates one inbox (shared memory it maps with ucp_mem_map) and
// names it in its worker address. A peer that can map it (same host, shared
// memory in both `tls`) claims a lane of its own at its first notified
// write, with one atomic add on the inbox's lane counter, and writes its
// rank into the lane's owner word. A notified write is then the data (a
// copy through the peer's mapped region, or a UCX put and its flush) and a
// release store of an 8-byte record into the lane's ring
// (rdma/internal/notify_ring.h: the value and the notification's sequence
// number as its tag). The target's Progress()
// polls the lanes and publishes each lane's consumed count in the lane,
// where the writer reads it through its mapping when the ring looks full.
//
// Layout (64-byte lines; `lanes` and `slots` are in the worker address):
//   [0]                 the number of lanes claimed (writers add 1)
//   [64 + i * lane]     lane i: owner word (kOwnerMagic << 32 | rank),
//                       consumed count (written by the target)
//   [128 + i * lane]    lane i's ring: `slots` 8-byte records
// where lane = 64 + slots * 8.
//
// Everything a peer writes here is untrusted: the counter is clamped, an
// owner word is read once (a lane whose word is not ours is skipped until
// it is, one naming no rank is refused for good), and records pass the
// ring's tag check. A writer checks the consumed count its target publishes
// (NotifyRingWriter: kDataLoss when it goes back or passes what was posted).
// Pure logic over memory: the transport maps the inbox and posts the puts.
#ifndef RDMAFLOW_RDMA_UCX_FLAG_INBOX_H_
#define RDMAFLOW_RDMA_UCX_FLAG_INBOX_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/internal/notify_ring.h"

namespace rdmaflow::rdma::ucx {

struct FlagInboxLayout {
  // 64 same-host writers with 512 records each: 260 KiB per transport.
  static constexpr uint32_t kDefaultLanes = 64;
  static constexpr uint32_t kDefaultSlots = 512;
  static constexpr uint32_t kMaxLanes = 1024;
  static constexpr uint64_t kOwnerMagic = 0x52464c4eu;  // 'RFLN'

  uint32_t lanes = kDefaultLanes;
  uint32_t slots = kDefaultSlots;

  size_t LaneBytes() const { return 64 + size_t{slots} * kNotifyRecordBytes; }
  size_t TotalBytes() const { return 64 + size_t{lanes} * LaneBytes(); }
  size_t OwnerOffset(uint32_t lane) const { return 64 + lane * LaneBytes(); }
  size_t ConsumedOffset(uint32_t lane) const { return OwnerOffset(lane) + 8; }
  size_t RingOffset(uint32_t lane) const { return OwnerOffset(lane) + 64; }

  // A layout a peer announced: kInvalidArgument naming `peer_rank` unless
  // 1 <= lanes <= kMaxLanes, `slots` is a ring size notify_ring.h takes,
  // and `bytes` (the announced region's size) holds it.
  static absl::StatusOr<FlagInboxLayout> Validate(uint32_t lanes,
                                                  uint32_t slots,
                                                  uint64_t bytes,
                                                  int peer_rank);
};

// The writer's lane in a peer's inbox, through this process's mapping of it.
// Single-thread (the transport's).
class FlagLane {
 public:
  // Claims a lane in the inbox mapped at `inbox` and names `rank` its owner;
  // nullopt when every lane is taken (the writer then notifies by active
  // message). `peer_rank` names the target in errors.
  static std::optional<FlagLane> Claim(std::byte* inbox,
                                       const FlagInboxLayout& layout, int rank,
                                       int peer_rank);

  uint32_t index() const { return index_; }
  // The inbox, as this process maps it.
  std::byte* inbox() const { return inbox_; }
  uint32_t slots() const { return slots_; }
  // Offset of the ring's slot `slot` from the inbox's start.
  uint64_t RecordOffset(uint32_t slot) const {
    return ring_offset_ + uint64_t{slot} * kNotifyRecordBytes;
  }
  NotifyRingWriter& writer() { return writer_; }

 private:
  FlagLane(std::byte* inbox, uint32_t index, const FlagInboxLayout& layout,
           const uint64_t* consumed, int peer_rank)
      : inbox_(inbox),
        index_(index),
        slots_(layout.slots),
        ring_offset_(layout.RingOffset(index)),
        writer_(consumed, layout.slots, peer_rank) {}

  std::byte* inbox_;
  uint32_t index_;
  uint32_t slots_;
  uint64_t ring_offset_;
  NotifyRingWriter writer_;
};

// The target's side: polls the claimed lanes of its own inbox. Single-thread.
class FlagInboxReader {
 public:
  // `inbox`: TotalBytes() of zeroed memory peers write into.
  FlagInboxReader(std::byte* inbox, const FlagInboxLayout& layout);

  // Delivers, lane by lane and in each lane's order, every record that has
  // arrived, with the rank its lane's owner named; returns how many.
  // `malformed` is told once about each lane whose owner word names no rank.
  int Poll(absl::FunctionRef<void(int rank, uint32_t value)> deliver,
           absl::FunctionRef<void(uint32_t lane)> malformed);

  // Lanes claimed so far (at most the layout's).
  uint32_t claimed() const { return static_cast<uint32_t>(lanes_.size()); }

 private:
  struct Lane {
    NotifyRingReader reader;
    uint64_t* owner_word;
    uint64_t* consumed_word;
    int rank = -1;        // From the owner word, once it was ours.
    bool refused = false;  // The owner word named no rank.
    uint64_t published = 0;  // Consumed count last written.
  };

  std::byte* inbox_;
  FlagInboxLayout layout_;
  std::vector<Lane> lanes_;
};

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_FLAG_INBOX_H_
