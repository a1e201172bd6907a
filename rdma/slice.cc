#include "rdma/slice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow::rdma::slice_internal {

absl::Status FaultStatus(Fault fault, const LocalSlice* local, const RemoteSlice& remote,
                         const RemoteSlice* data, int peer_rank, absl::string_view backend,
                         Moves moves) {
  switch (fault) {
    case Fault::kNoLocalRegion:
      return absl::InvalidArgumentError(absl::StrCat(
          "operation with peer rank ", peer_rank,
          " has no local memory region (null or moved-from MemoryRegion)"));
    case Fault::kLocalKind:
      return absl::InvalidArgumentError(absl::StrCat(
          "the local region of an operation with peer rank ", peer_rank, " is ",
          device::MemoryKindName(local->region->descriptor().memory_kind),
          " memory, and the '", backend, "' backend moves host memory only"));
    case Fault::kNoRemoteRegion:
      return absl::InvalidArgumentError(absl::StrCat(
          "operation with peer rank ", peer_rank, " has no remote region"));
    case Fault::kRemoteBackend:
      return absl::InvalidArgumentError(absl::StrCat(
          "remote region was registered by the '", remote.region->backend,
          "' backend but this endpoint is '", backend,
          "'; all ranks must use the same transport"));
    case Fault::kRemoteOwner:
      return absl::InvalidArgumentError(absl::StrCat(
          "remote region belongs to rank ", remote.region->owner_rank,
          " but this endpoint is connected to rank ", peer_rank,
          "; use the endpoint of the region's owner"));
    case Fault::kRemoteKind:
      // A host backend moves host memory: a device region's address means
      // nothing to it (docs/device.md); the device path moves device regions.
      return absl::InvalidArgumentError(absl::StrCat(
          remote.region->DebugString(), " is ",
          device::MemoryKindName(remote.region->memory_kind), " memory, and the '", backend,
          moves == Moves::kHostMemory ? "' backend moves host memory only"
                                      : "' backend reaches a peer's device memory only"));
    case Fault::kLengths:
      return absl::InvalidArgumentError(absl::StrCat(
          "operation with peer rank ", peer_rank, " has local length ", local->length,
          " and remote length ", remote.length, "; both must be equal and non-zero"));
    case Fault::kLocalRange:
      return absl::OutOfRangeError(absl::StrFormat(
          "local slice [%u, %u) is outside its %u-byte region (operation with "
          "peer rank %d)",
          local->offset, local->offset + local->length, local->region->size(), peer_rank));
    case Fault::kRemoteRange:
      return absl::OutOfRangeError(absl::StrFormat(
          "remote slice [%u, %u) is outside %s", remote.offset, remote.offset + remote.length,
          remote.region->DebugString()));
    case Fault::kMappingLength:
      return absl::InvalidArgumentError(absl::StrCat(
          "mapping of peer rank ", peer_rank, "'s memory has length 0"));
    case Fault::kFlagShape:
      return absl::InvalidArgumentError(absl::StrCat(
          "the flag word of a write to peer rank ", peer_rank, " is ", remote.length,
          " bytes at offset ", remote.offset, " of ", remote.region->DebugString(),
          ": it must be 8 bytes at an 8-byte aligned address"));
    case Fault::kFlagInsideData:
      return absl::InvalidArgumentError(absl::StrCat(
          "the flag word of a write to peer rank ", peer_rank, " (offset ", remote.offset,
          ") lies inside the written bytes [", data->offset, ", ",
          data->offset + data->length, "): put it behind them"));
  }
  return absl::InternalError("rdma slice check: unknown fault");
}

}  // namespace rdmaflow::rdma::slice_internal
