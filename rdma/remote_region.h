// File: remote_region.h
// -----------------------------------------------------------------------------
// RemoteRegion: the serializable descriptor of a registered memory region that
// a peer may access with one-sided writes and reads. It names the owner rank,
// the address and length of the memory in the owner's address space, and the
// backend's packed remote key. Every remote access is bounds-checked against
// it before anything is posted (see slice.h).
#ifndef RDMAFLOW_RDMA_REMOTE_REGION_H_
#define RDMAFLOW_RDMA_REMOTE_REGION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/memory_kind.h"

namespace rdmaflow::rdma {

// A value type: copyable, no resources. Thread-compatible.
struct RemoteRegion {
  std::string backend;      // Backend that registered it, e.g. "ucx".
  int32_t owner_rank = -1;  // Rank that owns the memory.
  uint64_t address = 0;     // Start address in the owner's address space.
  uint64_t length = 0;      // Bytes.
  std::string packed_key;   // Backend-specific remote key, opaque here.
  // Host or device memory. A backend that moves host memory only refuses
  // a device region (CheckTransfer), naming it.
  device::MemoryKind memory_kind = device::MemoryKind::kHost;

  // Checks the fields are self-consistent: a backend name, a rank >= 0, a
  // non-zero length, no address overflow, a non-empty key, a known kind.
  // Returns kInvalidArgument naming the bad field.
  absl::Status Validate() const;

  // Wire encoding (remote_region.proto). Never fails for a valid region.
  std::string Serialize() const;

  // Decodes and validates bytes produced by Serialize().
  // Returns kInvalidArgument for truncated or corrupt bytes, an unknown
  // version, or a descriptor that fails Validate().
  static absl::StatusOr<RemoteRegion> Parse(absl::string_view bytes);

  // "ucx region of rank 1 [0x7f..+4096)" ("ucx device region ..." for
  // device memory), for error messages.
  std::string DebugString() const;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_REMOTE_REGION_H_
