// File: flag_inbox.cc
#include "rdma/ucx/flag_inbox.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/shared_word.h"

namespace rdmaflow::rdma::ucx {
namespace {

uint64_t* WordAt(std::byte* inbox, size_t offset) {
  return reinterpret_cast<uint64_t*>(inbox + offset);
}

}  // namespace

absl::StatusOr<FlagInboxLayout> FlagInboxLayout::Validate(uint32_t lanes,
                                                          uint32_t slots,
                                                          uint64_t bytes,
                                                          int peer_rank) {
  if (lanes == 0 || lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer_rank, " announced a flag inbox of ", lanes,
        " lanes; expected 1 to ", kMaxLanes,
        " (is it running another rdmaflow version?)"));
  }
  // The ring's own checks, at a stand-in aligned address.
  absl::Status ring = ValidateNotifyRing(/*address=*/64, slots, peer_rank);
  if (!ring.ok()) return ring;
  FlagInboxLayout layout;
  layout.lanes = lanes;
  layout.slots = slots;
  // lanes <= 2^10 and slots <= 2^16: TotalBytes() is below 2^30.
  if (bytes < layout.TotalBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer_rank, " announced a flag inbox of ", lanes, " lanes of ",
        slots, " slots (", layout.TotalBytes(), " bytes) in a region of ",
        bytes, " bytes"));
  }
  return layout;
}

std::optional<FlagLane> FlagLane::Claim(std::byte* inbox,
                                        const FlagInboxLayout& layout,
                                        int rank, int peer_rank) {
  const uint64_t index =
      __atomic_fetch_add(WordAt(inbox, 0), uint64_t{1}, __ATOMIC_ACQ_REL);
  if (index >= layout.lanes) return std::nullopt;
  const auto lane = static_cast<uint32_t>(index);
  StoreSharedWord(WordAt(inbox, layout.OwnerOffset(lane)),
                  (FlagInboxLayout::kOwnerMagic << 32) |
                      static_cast<uint32_t>(rank));
  return FlagLane(inbox, lane, layout, WordAt(inbox, layout.ConsumedOffset(lane)),
                  peer_rank);
}

FlagInboxReader::FlagInboxReader(std::byte* inbox,
                                 const FlagInboxLayout& layout)
    : inbox_(inbox), layout_(layout) {
  lanes_.reserve(layout.lanes);
}

int FlagInboxReader::Poll(
    absl::FunctionRef<void(int rank, uint32_t value)> deliver,
    absl::FunctionRef<void(uint32_t lane)> malformed) {
  // Peers add to the counter: it may pass the lanes there are.
  const uint64_t claimed =
      std::min<uint64_t>(LoadSharedWord(WordAt(inbox_, 0)), layout_.lanes);
  while (lanes_.size() < claimed) {
    const auto i = static_cast<uint32_t>(lanes_.size());
    lanes_.push_back(Lane{
        NotifyRingReader(WordAt(inbox_, layout_.RingOffset(i)), layout_.slots),
        WordAt(inbox_, layout_.OwnerOffset(i)),
        WordAt(inbox_, layout_.ConsumedOffset(i))});
  }
  int delivered = 0;
  for (uint32_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    if (lane.refused) continue;
    if (lane.rank < 0) {
      // Read once: what the owner writes later changes nothing.
      const uint64_t owner = LoadSharedWord(lane.owner_word);
      if ((owner >> 32) != FlagInboxLayout::kOwnerMagic) continue;  // Not yet.
      const auto rank = static_cast<uint32_t>(owner);
      if (rank > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
        lane.refused = true;
        malformed(i);
        continue;
      }
      lane.rank = static_cast<int>(rank);
    }
    const int rank = lane.rank;
    // At most a ring's worth per poll: an honest writer cannot have more
    // outstanding, a forging one must not hold the loop.
    delivered += lane.reader.Poll([&](uint32_t value) { deliver(rank, value); },
                                  layout_.slots);
    if (lane.reader.consumed() != lane.published) {
      lane.published = lane.reader.consumed();
      StoreSharedWord(lane.consumed_word, lane.published);
    }
  }
  return delivered;
}

}  // namespace rdmaflow::rdma::ucx
