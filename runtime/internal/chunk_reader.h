// File: internal/chunk_reader.h
// -----------------------------------------------------------------------------
// rdma_copy's reader of a chunk in its message ring: the length word and
// the TensorChunk header a sender wrote in front of the payload. Private to
// runtime/rdma_copy_communicator.cc (and its tests).
#ifndef RDMAFLOW_RUNTIME_INTERNAL_CHUNK_READER_H_
#define RDMAFLOW_RUNTIME_INTERNAL_CHUNK_READER_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "runtime/tensor_message.pb.h"

namespace rdmaflow::runtime::internal {

// Room in front of each chunk's payload for the 4-byte length word and the
// serialized header: a ring slot is this plus the chunk size.
inline constexpr size_t kChunkHeaderRoom = 512;

// A chunk as the receiver took it: a private copy of its header, and where
// its payload starts in the slot (4 + the header's length).
struct ChunkInSlot {
  TensorChunk header;
  size_t payload_offset = 0;
};

// Reads the chunk rank `peer` wrote at `slot` (kChunkHeaderRoom + the chunk
// size bytes of our ring, which the sender may rewrite at any moment): the
// length word and the header's bytes are copied once into private memory
// and parsed there, so nothing after this reads them in the ring again.
// kDataLoss naming `peer` for a length past the room or an undecodable
// header. The header's fields are untrusted still: the caller checks them
// (CheckPiece, the plan) before they size or offset anything.
absl::StatusOr<ChunkInSlot> ReadChunk(int peer, const std::byte* slot);

}  // namespace rdmaflow::runtime::internal

#endif  // RDMAFLOW_RUNTIME_INTERNAL_CHUNK_READER_H_
