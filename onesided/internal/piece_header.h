// File: internal/piece_header.h
// -----------------------------------------------------------------------------
// The header a Messenger sender writes at the start of each slot, and the
// check a receiver makes of it before it copies a byte. The header lies in
// memory the peer writes, so every field is untrusted: CheckPiece() accepts
// only the piece that can follow what has arrived so far. Pure code, shared
// by the Messenger and its fuzz target.
#ifndef RDMAFLOW_ONESIDED_INTERNAL_PIECE_HEADER_H_
#define RDMAFLOW_ONESIDED_INTERNAL_PIECE_HEADER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace rdmaflow::onesided::internal {

inline constexpr size_t kPieceHeaderBytes = 64;

struct PieceHeader {
  uint64_t tag;
  uint64_t message_bytes;
  uint64_t offset;  // of this piece in the message
  uint64_t bytes;   // of this piece
};
static_assert(sizeof(PieceHeader) <= kPieceHeaderBytes);

// The message a link is in the middle of receiving.
struct PartialMessage {
  uint64_t tag = 0;
  uint64_t message_bytes = 0;
  uint64_t arrived = 0;  // < message_bytes
};

// OK when `piece` is the next piece of the link: with no message under way
// (`current` null), the first piece of a new one; else the piece of
// `current` at offset `arrived`, with its tag and size. Either way its
// `bytes` is exactly min(slot_bytes, what remains of the message), so
// offset + bytes <= message_bytes always holds for an accepted piece.
// kDataLoss naming the broken rule otherwise.
absl::Status CheckPiece(const PieceHeader& piece, const PartialMessage* current,
                        size_t slot_bytes);

}  // namespace rdmaflow::onesided::internal

#endif  // RDMAFLOW_ONESIDED_INTERNAL_PIECE_HEADER_H_
