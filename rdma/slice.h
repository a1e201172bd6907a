// File: slice.h
// -----------------------------------------------------------------------------
// LocalSlice and RemoteSlice name the bytes an Endpoint operation moves, and
// CheckTransfer() is the one bounds check every backend runs before it posts.
#ifndef RDMAFLOW_RDMA_SLICE_H_
#define RDMAFLOW_RDMA_SLICE_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "device/memory_kind.h"
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

namespace slice_internal {

// Which of the checks below failed.
enum class Fault {
  kNoLocalRegion,
  kLocalKind,
  kNoRemoteRegion,
  kRemoteBackend,
  kRemoteOwner,
  kRemoteKind,
  kLengths,
  kLocalRange,
  kRemoteRange,
  kMappingLength,
  kFlagShape,
  kFlagInsideData,
};

// The status of a failed check, with its message: out of line, so that the
// checks themselves inline into every post. `local` may be null where the
// check has none; `data` is a flag word's data.
absl::Status FaultStatus(Fault fault, const LocalSlice* local, const RemoteSlice& remote,
                         const RemoteSlice* data, int peer_rank, absl::string_view backend,
                         Moves moves);

// The remote half of a post or a mapping: the region's descriptor names
// this backend and the endpoint's peer, and is memory the backend moves.
inline absl::Status CheckRemoteRegion(const RemoteSlice& remote, int peer_rank,
                                      absl::string_view backend, Moves moves) {
  if (ABSL_PREDICT_FALSE(remote.region == nullptr)) {
    return FaultStatus(Fault::kNoRemoteRegion, nullptr, remote, nullptr, peer_rank, backend,
                       moves);
  }
  if (absl::Status status = remote.region->Validate(); ABSL_PREDICT_FALSE(!status.ok())) {
    return status;
  }
  Fault fault;
  if (ABSL_PREDICT_FALSE(absl::string_view(remote.region->backend) != backend)) {
    fault = Fault::kRemoteBackend;
  } else if (ABSL_PREDICT_FALSE(remote.region->owner_rank != peer_rank)) {
    fault = Fault::kRemoteOwner;
  } else if (ABSL_PREDICT_FALSE(
                 moves != Moves::kAnyMemory &&
                 remote.region->memory_kind != (moves == Moves::kHostMemory
                                                    ? device::MemoryKind::kHost
                                                    : device::MemoryKind::kDevice))) {
    fault = Fault::kRemoteKind;
  } else {
    return absl::OkStatus();
  }
  return FaultStatus(fault, nullptr, remote, nullptr, peer_rank, backend, moves);
}

inline bool RemoteRangeOk(const RemoteSlice& remote) {
  return remote.offset <= remote.region->length &&
         remote.length <= remote.region->length - remote.offset;
}

}  // namespace slice_internal

// Checks that `local` and `remote` are valid, in bounds, of equal non-zero
// length, that `remote` belongs to `peer_rank` and to `backend`, and that
// both are memory the backend moves (`moves`).
// Returns kInvalidArgument (null region, zero or unequal lengths, another
// backend's or another rank's descriptor, malformed descriptor, memory of
// another kind) or kOutOfRange (a slice past the end of its region), each
// message naming the peer and the offending offsets.
// Inline: every post runs it.
inline absl::Status CheckTransfer(const LocalSlice& local, const RemoteSlice& remote,
                                  int peer_rank, absl::string_view backend,
                                  Moves moves = Moves::kHostMemory) {
  using slice_internal::Fault;
  Fault fault;
  if (ABSL_PREDICT_FALSE(local.region == nullptr || local.region->data() == nullptr)) {
    fault = Fault::kNoLocalRegion;
  } else if (ABSL_PREDICT_FALSE(moves == Moves::kHostMemory &&
                                local.region->descriptor().memory_kind !=
                                    device::MemoryKind::kHost)) {
    fault = Fault::kLocalKind;
  } else if (absl::Status status =
                 slice_internal::CheckRemoteRegion(remote, peer_rank, backend, moves);
             ABSL_PREDICT_FALSE(!status.ok())) {
    return status;
  } else if (ABSL_PREDICT_FALSE(local.length == 0 || local.length != remote.length)) {
    fault = Fault::kLengths;
  } else if (ABSL_PREDICT_FALSE(local.offset > local.region->size() ||
                                local.length > local.region->size() - local.offset)) {
    fault = Fault::kLocalRange;
  } else if (ABSL_PREDICT_FALSE(!slice_internal::RemoteRangeOk(remote))) {
    fault = Fault::kRemoteRange;
  } else {
    return absl::OkStatus();
  }
  return slice_internal::FaultStatus(fault, &local, remote, nullptr, peer_rank, backend,
                                     moves);
}

// The same checks of `remote` alone (non-zero length), for a mapping
// (Endpoint::MapRemote).
inline absl::Status CheckRemoteSlice(const RemoteSlice& remote, int peer_rank,
                                     absl::string_view backend,
                                     Moves moves = Moves::kHostMemory) {
  using slice_internal::Fault;
  if (absl::Status status =
          slice_internal::CheckRemoteRegion(remote, peer_rank, backend, moves);
      ABSL_PREDICT_FALSE(!status.ok())) {
    return status;
  }
  Fault fault;
  if (ABSL_PREDICT_FALSE(remote.length == 0)) {
    fault = Fault::kMappingLength;
  } else if (ABSL_PREDICT_FALSE(!slice_internal::RemoteRangeOk(remote))) {
    fault = Fault::kRemoteRange;
  } else {
    return absl::OkStatus();
  }
  return slice_internal::FaultStatus(fault, nullptr, remote, nullptr, peer_rank, backend,
                                     moves);
}

// The flag word of a flagged write (Endpoint::PostWriteWithFlag) whose
// data goes to `data`, which CheckTransfer accepted: the checks of
// CheckRemoteSlice (the region's only where it is not the data's), and 8
// bytes at an 8-byte aligned address, outside the written bytes
// (kInvalidArgument otherwise), so that one aligned store places it whole
// and no byte of the data can pass for it.
inline absl::Status CheckFlagWord(const RemoteSlice& flag_word, const RemoteSlice& data,
                                  int peer_rank, absl::string_view backend) {
  using slice_internal::Fault;
  if (flag_word.region == nullptr || flag_word.region != data.region) {
    if (absl::Status status = slice_internal::CheckRemoteRegion(flag_word, peer_rank, backend,
                                                                Moves::kHostMemory);
        ABSL_PREDICT_FALSE(!status.ok())) {
      return status;
    }
  }
  Fault fault;
  if (ABSL_PREDICT_FALSE(!slice_internal::RemoteRangeOk(flag_word))) {
    fault = Fault::kRemoteRange;
  } else if (ABSL_PREDICT_FALSE(flag_word.length != sizeof(uint64_t) ||
                                flag_word.address() % sizeof(uint64_t) != 0)) {
    fault = Fault::kFlagShape;
    // Inside the data, the flag's value could land with the data before the
    // rest of it: a peer polling the word would stop early.
  } else if (ABSL_PREDICT_FALSE(flag_word.region == data.region &&
                                flag_word.offset < data.offset + data.length &&
                                data.offset < flag_word.offset + flag_word.length)) {
    fault = Fault::kFlagInsideData;
  } else {
    return absl::OkStatus();
  }
  return slice_internal::FaultStatus(fault, nullptr, flag_word, &data, peer_rank, backend,
                                     Moves::kHostMemory);
}

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_SLICE_H_
