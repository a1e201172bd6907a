// File: internal/slot_state.h
// -----------------------------------------------------------------------------
// The executor's per-transfer state: SendSlot on the sender, RecvSlot on the
// receiver, and the lease a received tensor holds on its RecvSlot; and the
// checks of every word a peer writes into that state (metadata of dynamic
// tensors, credits), pure functions defined in executor.cc. Private to
// runtime/executor*.cc (and their tests).
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "onesided/slots/credit_writer.h"
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

// --- Checks of peer-written words -------------------------------------------
// Everything a peer writes into our memory is untrusted: these accept only
// what an honest peer running the same plan can write, with arithmetic that
// cannot wrap, and name the broken rule (kDataLoss) otherwise.

// A dynamic tensor's metadata slot as the receiver found it.
struct DynamicMetadata {
  uint64_t bytes = 0;          // equals CheckShape(shape)
  uint64_t source_offset = 0;  // [source_offset, +bytes) lies in the pool
  std::vector<int64_t> shape;
};

// Checks the kMetadataHeaderWords + rank words the sender wrote for its
// tensor number `seq` (0-based) of `info` (layout: rank_plan.h): the
// sequence is exactly seq + 1 (not repeated, not skipped), the writer is
// `info.src_rank`, the shape fits the spec and its byte count is the one
// written, and the source range lies inside the sender's pool of
// `source_pool_bytes`. kDataLoss naming the transfer and the rule otherwise.
absl::StatusOr<DynamicMetadata> CheckDynamicMetadata(
    const TransferInfo& info, absl::Span<const uint64_t> words, uint64_t seq,
    uint64_t source_pool_bytes);

// Reads a dynamic tensor's metadata slot where the sender wrote it (`slot`,
// in our receive region, which the sender may rewrite at any moment): the
// words are copied once into private memory, checked there with
// CheckDynamicMetadata, and only the copy is used. CheckDynamicMetadata's
// errors.
absl::StatusOr<DynamicMetadata> ReadDynamicMetadata(const TransferInfo& info,
                                                    const std::byte* slot, uint64_t seq,
                                                    uint64_t source_pool_bytes);

// Checks a credit word (the receiver's count of released tensors): it never
// goes back (`previous` is the last value accepted) and never counts more
// tensors than were `sent`. kDataLoss naming the receiver otherwise.
absl::Status CheckCredit(const TransferInfo& info, uint64_t credit,
                         uint64_t previous, uint64_t sent);

// Checks a write notification for the next step of a receive slot: its
// stage is the one due, and the sender did not write a stage we still hold
// (`arrived` tensors so far, `released` of them released; the sender may
// run `depth` ahead of the releases). kDataLoss naming the sender otherwise.
absl::Status CheckArrival(const TransferInfo& info, int stage,
                          uint64_t arrived, uint64_t released);

// Sender side of one transfer. Progress-thread only.
struct SendSlot {
  TransferInfo info;
  rdma::Endpoint* endpoint = nullptr;
  const rdma::RemoteRegion* remote = nullptr;  // the receiver's link region
  // Released count the receiver writes into our credit region (untrusted),
  // and the last value of it CheckCredit accepted: what flow control uses.
  const uint64_t* credit = nullptr;
  uint64_t credit_seen = 0;
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

  // The receiver's released count, as last checked.
  uint64_t released() const { return credit_seen; }
  // The credit word as the receiver wrote it, unchecked.
  uint64_t LoadCredit() const {
    return __atomic_load_n(credit, __ATOMIC_ACQUIRE);
  }
};

// Loads `slot`'s credit word once, checks that value (CheckCredit against
// `credit_seen` and `next_seq`) and, if valid, makes it `credit_seen`, the
// count flow control uses. CheckCredit's kDataLoss otherwise (`slot` is
// left as it was).
absl::Status RefreshCredit(SendSlot& slot);

// Receiver side of one transfer. Shared with the leases of tensors received
// from it; apart from `dropped`, progress-thread only.
struct RecvSlot {
  TransferInfo info;
  std::shared_ptr<rdma::MemoryRegion> region;  // the link region
  rdma::Endpoint* endpoint = nullptr;          // to the sender
  // The link's credit writer (owned by the executor): word `slot_index`
  // is this slot's released count at the sender.
  onesided::CreditWriter* credits = nullptr;
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
