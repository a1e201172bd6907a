// File: piece_stream_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for the Messenger's (and rdma_copy's) piece check: the
// input is a stream of peer-written piece headers, applied as a receiver
// applies them. Every accepted piece is copied into a buffer of exactly its
// message's size (allocated at the message's first piece), so a piece the
// check wrongly accepts is an out-of-bounds write AddressSanitizer reports.
// Built by tools/fuzz.sh with --config=fuzz; without it, a no-op binary.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "onesided/internal/piece_header.h"

namespace {

using rdmaflow::onesided::internal::CheckPiece;
using rdmaflow::onesided::internal::PartialMessage;
using rdmaflow::onesided::internal::PieceHeader;

// Small slots and messages keep the copies cheap; the header fields are
// still full 64-bit values from the input.
constexpr size_t kSlotBytes = 64;
constexpr uint64_t kMaxBuffered = 1 << 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> payload(kSlotBytes, 0xAB);
  std::vector<uint8_t> message;
  PartialMessage current;
  bool under_way = false;
  for (size_t at = 0; at + sizeof(PieceHeader) <= size; at += sizeof(PieceHeader)) {
    PieceHeader h;
    std::memcpy(&h, data + at, sizeof(h));
    if (!CheckPiece(h, under_way ? &current : nullptr, kSlotBytes).ok()) continue;
    if (h.offset == 0) {
      // A message too large to buffer waits for a receive in the Messenger;
      // here it is skipped (nothing to copy into).
      if (h.message_bytes > kMaxBuffered) continue;
      message.assign(h.message_bytes, 0);
      current = {h.tag, h.message_bytes, 0};
    }
    if (h.bytes > 0) std::memcpy(message.data() + h.offset, payload.data(), h.bytes);
    current.arrived += h.bytes;
    under_way = current.arrived < current.message_bytes;
  }
  return 0;
}
