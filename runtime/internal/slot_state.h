// File: internal/slot_state.h
// -----------------------------------------------------------------------------
// The executor's per-transfer state: SendSlot on the sender, RecvSlot on the
// receiver, and the lease a received tensor holds on its RecvSlot. Private
// to runtime/executor*.cc.
#ifndef RDMAFLOW_RUNTIME_INTERNAL_SLOT_STATE_H_
#define RDMAFLOW_RUNTIME_INTERNAL_SLOT_STATE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <memory>
#include <utility>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "runtime/communicator.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime::internal {

inline constexpr int kMaxStages = 16;

// Notification value of a write into `slot_index`, stage `stage`.
inline uint32_t EncodeNotification(int slot_index, int stage) {
  return static_cast<uint32_t>(slot_index) << 4 | static_cast<uint32_t>(stage);
}

// Sender side of one transfer. Progress-thread only.
struct SendSlot {
  TransferInfo info;
  rdma::Endpoint* endpoint = nullptr;
  const rdma::RemoteRegion* remote = nullptr;  // the receiver's link region
  // Released count the receiver writes into our credit region.
  const uint64_t* credit = nullptr;
  uint64_t next_seq = 0;
  // Slots of the same link whose memory overlaps this one's (shared slots),
  // and whether they come before this one in the step schedule.
  std::vector<std::pair<const SendSlot*, bool>> overlaps;
  // Staging for tensors outside registered memory (static), allocated on
  // first use: `depth` copies of the tensor.
  std::unique_ptr<rdma::MemoryRegion> staging;
  std::array<bool, kMaxStages> staging_busy{};
  // Dynamic: metadata staging at `meta_offset + stage * slot_bytes` of the
  // executor's metadata region, and pool segments the receiver may still
  // read, as (sequence, pool offset).
  size_t meta_offset = 0;
  std::array<bool, kMaxStages> meta_busy{};
  std::deque<std::pair<uint64_t, size_t>> sources;
  // A write that waits for memory it shares with another slot to be
  // released (posted by the progress engine once it is).
  struct PendingWrite {
    uint64_t seq = 0;
    rdma::LocalSlice src;
    rdma::RemoteSlice dst;
    uint32_t notification = 0;
    // Copied into each post attempt: a refused post destroys its callback.
    std::function<void(absl::Status)> done;
  };
  std::optional<PendingWrite> pending;

  uint64_t released() const {
    return __atomic_load_n(credit, __ATOMIC_ACQUIRE);
  }
};

// Receiver side of one transfer. Shared with the leases of tensors received
// from it; apart from `dropped`, progress-thread only.
struct RecvSlot {
  TransferInfo info;
  std::shared_ptr<rdma::MemoryRegion> region;  // the link region
  rdma::Endpoint* endpoint = nullptr;          // to the sender
  const rdma::RemoteRegion* credit_remote = nullptr;  // sender's credits
  const rdma::RemoteRegion* source_pool = nullptr;    // dynamic sources
  // Stages whose tensor the user dropped (bit per stage), set by leases on
  // any thread; `dirty` (executor-wide) counts such drops.
  std::atomic<uint32_t> dropped{0};
  std::shared_ptr<std::atomic<int>> dirty;
  // Set when a re-plan replaced this slot: drops no longer send credits.
  bool retired = false;
  uint64_t arrived = 0;   // notifications received
  uint64_t next_seq = 0;  // Recv() calls
  // Released count (contiguous) and stages released beyond it.
  uint64_t released = 0;
  uint32_t done_stages = 0;
  // Credit write: our source word (in the executor's credit-out region) and
  // whether a write is in flight / the value last posted.
  size_t credit_word = 0;
  bool credit_busy = false;
  bool credit_queued = false;
  uint64_t credit_posted = 0;
  // Dynamic: the destination pool (kept alive by leases) and the offsets
  // held per stage.
  std::shared_ptr<rdma::MemoryRegion> dest_region;
  std::array<size_t, kMaxStages> dest{};
  std::array<bool, kMaxStages> dest_valid{};
};

// Held by a ReceivedTensor of the zero-copy path; dropping it marks its
// stage released (lock-free) for the progress engine to act on.
class SlotLease final : public ReceivedTensor::Lease {
 public:
  SlotLease(std::shared_ptr<RecvSlot> slot, int stage)
      : slot_(std::move(slot)), stage_(stage) {}
  ~SlotLease() override {
    slot_->dropped.fetch_or(1u << stage_, std::memory_order_release);
    slot_->dirty->fetch_add(1, std::memory_order_release);
  }

 private:
  std::shared_ptr<RecvSlot> slot_;
  int stage_;
};

}  // namespace rdmaflow::runtime::internal

#endif  // RDMAFLOW_RUNTIME_INTERNAL_SLOT_STATE_H_
