// File: notify_ring.cc
#include "rdma/internal/notify_ring.h"

#include <algorithm>
#include <limits>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "common/shared_word.h"

namespace rdmaflow::rdma {
namespace {

// Peer-written memory: one 8-byte load, after which the data it guards
// (placed before it by the same queue pair) is read.
uint64_t LoadPeerWord(const uint64_t* word) { return LoadSharedWord(word); }

}  // namespace

uint64_t NotifyRecord(uint64_t seq, uint32_t value) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(seq)) << 32) | value;
}

absl::Status ValidateNotifyRing(uint64_t address, uint32_t slots,
                                int peer_rank) {
  if (slots < kMinNotifySlots || slots > kMaxNotifySlots ||
      !absl::has_single_bit(slots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer_rank, " announced a notification ring of ", slots,
        " slots; expected a power of two in [", kMinNotifySlots, ", ",
        kMaxNotifySlots, "] (is it running another rdmaflow version?)"));
  }
  const uint64_t bytes = uint64_t{slots} * kNotifyRecordBytes;
  if (address == 0 || address % kNotifyRecordBytes != 0 ||
      address > std::numeric_limits<uint64_t>::max() - bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer_rank, " announced a notification ring at 0x",
        absl::Hex(address), ", which is not an 8-byte aligned region of ",
        bytes, " bytes"));
  }
  return absl::OkStatus();
}

NotifyRingReader::NotifyRingReader(const uint64_t* ring, uint32_t slots)
    : ring_(ring),
      mask_(slots - 1),
      credit_every_(std::max<uint64_t>(1, slots / 4)) {}

int NotifyRingReader::Poll(absl::FunctionRef<void(uint32_t value)> deliver,
                           uint64_t max) {
  int delivered = 0;
  for (uint64_t n = 0; n < max; ++n) {
    const uint64_t record = LoadPeerWord(&ring_[consumed_ & mask_]);
    if (static_cast<uint32_t>(record >> 32) !=
        static_cast<uint32_t>(consumed_ + 1)) {
      return delivered;
    }
    ++consumed_;
    ++delivered;
    deliver(static_cast<uint32_t>(record));
  }
  return delivered;
}

std::optional<uint64_t> NotifyRingReader::CreditDue() const {
  if (consumed_ - credited_ < credit_every_) return std::nullopt;
  return consumed_;
}

NotifyRingWriter::NotifyRingWriter(const uint64_t* credit, uint32_t slots,
                                   int peer_rank)
    : credit_(credit), slots_(slots), peer_rank_(peer_rank) {}

absl::StatusOr<bool> NotifyRingWriter::HasRoom() {
  if (posted_ - consumed_ < slots_) return true;
  const uint64_t said = LoadPeerWord(credit_);
  if (said > posted_ || said < consumed_) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer_rank_, " says it consumed ", said,
        " of our notifications, but ", posted_, " were posted and it said ",
        consumed_, " before: its notification credit is corrupt or forged"));
  }
  consumed_ = said;
  return posted_ - consumed_ < slots_;
}

NotifyRingWriter::Next NotifyRingWriter::Take(uint32_t value) {
  ++posted_;
  return Next{static_cast<uint32_t>((posted_ - 1) % slots_),
              NotifyRecord(posted_, value)};
}

}  // namespace rdmaflow::rdma
