#include "onesided/internal/piece_header.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rdmaflow::onesided::internal {

absl::Status CheckPiece(const PieceHeader& h, const PartialMessage* current,
                        size_t slot_bytes) {
  auto broken = [&](auto&&... what) {
    return absl::DataLossError(absl::StrCat(
        "piece (tag ", h.tag, ", message of ", h.message_bytes, " bytes, ", h.bytes,
        " bytes at offset ", h.offset, ") breaks the message protocol: ", what...));
  };
  if (h.bytes > slot_bytes) {
    return broken("it is larger than a slot (", slot_bytes, " bytes)");
  }
  uint64_t left = h.message_bytes;
  if (h.offset == 0) {
    if (current != nullptr) {
      return broken("a new message began while the one of tag ", current->tag, " had ",
                    current->arrived, " of ", current->message_bytes, " bytes");
    }
  } else {
    if (current == nullptr) return broken("it continues no message");
    if (h.tag != current->tag || h.message_bytes != current->message_bytes ||
        h.offset != current->arrived) {
      return broken("the message under way has tag ", current->tag, ", ",
                    current->message_bytes, " bytes, ", current->arrived, " arrived");
    }
    left = h.message_bytes - h.offset;  // offset == arrived < message_bytes
  }
  const uint64_t expected = std::min<uint64_t>(slot_bytes, left);
  if (h.bytes != expected) return broken("it should have ", expected, " bytes");
  return absl::OkStatus();
}

}  // namespace rdmaflow::onesided::internal
