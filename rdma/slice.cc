#include "rdma/slice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow::rdma {

namespace {

// The remote half of a post or a mapping: the region's descriptor names
// this backend and the endpoint's peer.
absl::Status CheckRemoteRegion(const RemoteSlice& remote, int peer_rank,
                               absl::string_view backend, Moves moves) {
  if (remote.region == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operation with peer rank ", peer_rank, " has no remote region"));
  }
  if (absl::Status status = remote.region->Validate(); !status.ok()) {
    return status;
  }
  if (absl::string_view(remote.region->backend) != backend) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region was registered by the '", remote.region->backend,
        "' backend but this endpoint is '", backend,
        "'; all ranks must use the same transport"));
  }
  if (remote.region->owner_rank != peer_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region belongs to rank ", remote.region->owner_rank,
        " but this endpoint is connected to rank ", peer_rank,
        "; use the endpoint of the region's owner"));
  }
  // A host backend moves host memory: a device region's address means
  // nothing to it (docs/device.md); the device path moves device regions.
  const device::MemoryKind wanted =
      moves == Moves::kHostMemory ? device::MemoryKind::kHost : device::MemoryKind::kDevice;
  if (moves != Moves::kAnyMemory && remote.region->memory_kind != wanted) {
    return absl::InvalidArgumentError(absl::StrCat(
        remote.region->DebugString(), " is ",
        device::MemoryKindName(remote.region->memory_kind), " memory, and the '", backend,
        moves == Moves::kHostMemory ? "' backend moves host memory only"
                                    : "' backend reaches a peer's device memory only"));
  }
  return absl::OkStatus();
}

absl::Status CheckRemoteRange(const RemoteSlice& remote) {
  if (remote.offset > remote.region->length ||
      remote.length > remote.region->length - remote.offset) {
    return absl::OutOfRangeError(absl::StrFormat(
        "remote slice [%u, %u) is outside %s", remote.offset,
        remote.offset + remote.length, remote.region->DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTransfer(const LocalSlice& local, const RemoteSlice& remote,
                           int peer_rank, absl::string_view backend, Moves moves) {
  if (local.region == nullptr || local.region->data() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operation with peer rank ", peer_rank,
        " has no local memory region (null or moved-from MemoryRegion)"));
  }
  if (moves == Moves::kHostMemory &&
      local.region->descriptor().memory_kind != device::MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the local region of an operation with peer rank ", peer_rank, " is ",
        device::MemoryKindName(local.region->descriptor().memory_kind),
        " memory, and the '", backend, "' backend moves host memory only"));
  }
  if (absl::Status status = CheckRemoteRegion(remote, peer_rank, backend, moves);
      !status.ok()) {
    return status;
  }
  if (local.length == 0 || local.length != remote.length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operation with peer rank ", peer_rank, " has local length ",
        local.length, " and remote length ", remote.length,
        "; both must be equal and non-zero"));
  }
  if (local.offset > local.region->size() ||
      local.length > local.region->size() - local.offset) {
    return absl::OutOfRangeError(absl::StrFormat(
        "local slice [%u, %u) is outside its %u-byte region (operation with "
        "peer rank %d)",
        local.offset, local.offset + local.length, local.region->size(),
        peer_rank));
  }
  return CheckRemoteRange(remote);
}

absl::Status CheckRemoteSlice(const RemoteSlice& remote, int peer_rank,
                              absl::string_view backend, Moves moves) {
  if (absl::Status status = CheckRemoteRegion(remote, peer_rank, backend, moves);
      !status.ok()) {
    return status;
  }
  if (remote.length == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mapping of peer rank ", peer_rank, "'s memory has length 0"));
  }
  return CheckRemoteRange(remote);
}

absl::Status CheckFlagWord(const RemoteSlice& flag_word, const RemoteSlice& data,
                           int peer_rank, absl::string_view backend) {
  if (flag_word.region == nullptr || flag_word.region != data.region) {
    if (absl::Status status =
            CheckRemoteRegion(flag_word, peer_rank, backend, Moves::kHostMemory);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = CheckRemoteRange(flag_word); !status.ok()) {
    return status;
  }
  if (flag_word.length != sizeof(uint64_t) ||
      flag_word.address() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the flag word of a write to peer rank ", peer_rank, " is ",
        flag_word.length, " bytes at offset ", flag_word.offset, " of ",
        flag_word.region->DebugString(),
        ": it must be 8 bytes at an 8-byte aligned address"));
  }
  // Inside the data, the flag's value could land with the data before the
  // rest of it: a peer polling the word would stop early.
  if (flag_word.region == data.region && flag_word.offset < data.offset + data.length &&
      data.offset < flag_word.offset + flag_word.length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the flag word of a write to peer rank ", peer_rank, " (offset ", flag_word.offset,
        ") lies inside the written bytes [", data.offset, ", ", data.offset + data.length,
        "): put it behind them"));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::rdma
