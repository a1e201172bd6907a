// File: slice.h
// -----------------------------------------------------------------------------
// LocalSlice and RemoteSlice name the bytes an Endpoint operation moves, and
// CheckTransfer() is the one bounds check every backend runs before it posts.
#ifndef RDMAFLOW_RDMA_SLICE_H_
#define RDMAFLOW_RDMA_SLICE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"

namespace rdmaflow::rdma {

// [offset, offset + length) of a local registered region. The region must
// outlive the operation. Value type.
struct LocalSlice {
  const MemoryRegion* region = nullptr;
  size_t offset = 0;
  size_t length = 0;

  std::byte* data() const { return region->data() + offset; }
};

// [offset, offset + length) of a peer's registered region. The descriptor is
// read at post time only. Value type.
struct RemoteSlice {
  const RemoteRegion* region = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;

  uint64_t address() const { return region->address + offset; }
};

// Whole-region helpers.
inline LocalSlice WholeRegion(const MemoryRegion& region) {
  return {&region, 0, region.size()};
}
inline RemoteSlice WholeRegion(const RemoteRegion& region) {
  return {&region, 0, region.length};
}

// Which memory a backend moves: host memory on both sides (every host
// backend), a peer's device memory from host or device memory here (the
// device path, rdma/device), or either kind on both sides (ibverbs, whose
// device regions are registered through a dma-buf: GPUDirect RDMA; its
// registration checks keep other backends' device regions out).
enum class Moves { kHostMemory, kPeerDeviceMemory, kAnyMemory };

// Checks that `local` and `remote` are valid, in bounds, of equal non-zero
// length, that `remote` belongs to `peer_rank` and to `backend`, and that
// both are memory the backend moves (`moves`).
// Returns kInvalidArgument (null region, zero or unequal lengths, another
// backend's or another rank's descriptor, malformed descriptor, memory of
// another kind) or kOutOfRange (a slice past the end of its region), each
// message naming the peer and the offending offsets.
absl::Status CheckTransfer(const LocalSlice& local, const RemoteSlice& remote,
                           int peer_rank, absl::string_view backend,
                           Moves moves = Moves::kHostMemory);

// The same checks of `remote` alone (non-zero length), for a mapping
// (Endpoint::MapRemote).
absl::Status CheckRemoteSlice(const RemoteSlice& remote, int peer_rank,
                              absl::string_view backend, Moves moves = Moves::kHostMemory);

// The flag word of a flagged write (Endpoint::PostWriteWithFlag) whose
// data goes to `data`, which CheckTransfer accepted: the checks of
// CheckRemoteSlice (the region's only where it is not the data's), and 8
// bytes at an 8-byte aligned address, outside the written bytes
// (kInvalidArgument otherwise), so that one aligned store places it whole
// and no byte of the data can pass for it.
absl::Status CheckFlagWord(const RemoteSlice& flag_word, const RemoteSlice& data,
                           int peer_rank, absl::string_view backend);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_SLICE_H_
