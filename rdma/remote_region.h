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
#include <limits>
#include <string>

#include "absl/base/optimization.h"
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
  // Inline: every post runs it; the message is built out of line.
  absl::Status Validate() const {
    if (ABSL_PREDICT_FALSE(backend.empty())) return Invalid(Field::kBackend);
    if (ABSL_PREDICT_FALSE(owner_rank < 0)) return Invalid(Field::kOwnerRank);
    if (ABSL_PREDICT_FALSE(length == 0)) return Invalid(Field::kLength);
    if (ABSL_PREDICT_FALSE(address > std::numeric_limits<uint64_t>::max() - length)) {
      return Invalid(Field::kAddress);
    }
    if (ABSL_PREDICT_FALSE(packed_key.empty())) return Invalid(Field::kPackedKey);
    if (ABSL_PREDICT_FALSE(memory_kind != device::MemoryKind::kHost &&
                           memory_kind != device::MemoryKind::kDevice)) {
      return Invalid(Field::kMemoryKind);
    }
    return absl::OkStatus();
  }

  // Wire encoding (remote_region.proto). Never fails for a valid region.
  std::string Serialize() const;

  // Decodes and validates bytes produced by Serialize().
  // Returns kInvalidArgument for truncated or corrupt bytes, an unknown
  // version, or a descriptor that fails Validate().
  static absl::StatusOr<RemoteRegion> Parse(absl::string_view bytes);

  // "ucx region of rank 1 [0x7f..+4096)" ("ucx device region ..." for
  // device memory), for error messages.
  std::string DebugString() const;

 private:
  enum class Field { kBackend, kOwnerRank, kLength, kAddress, kPackedKey, kMemoryKind };
  // Validate()'s kInvalidArgument for the bad `field`.
  absl::Status Invalid(Field field) const;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_REMOTE_REGION_H_
