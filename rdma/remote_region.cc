#include "rdma/remote_region.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rdma/remote_region.pb.h"

namespace rdmaflow::rdma {
namespace {

// Version 1: the fields of RemoteRegionProto as first defined.
constexpr uint32_t kDescriptorVersion = 1;

}  // namespace

absl::Status RemoteRegion::Validate() const {
  if (backend.empty()) {
    return absl::InvalidArgumentError(
        "remote region descriptor has no backend name; was it produced by "
        "MemoryRegion::descriptor()?");
  }
  if (owner_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region descriptor has a negative owner rank (", owner_rank,
        ")"));
  }
  if (length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote region descriptor of rank ", owner_rank,
                     " has length 0"));
  }
  if (address > std::numeric_limits<uint64_t>::max() - length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "remote region descriptor of rank %d wraps around the address space "
        "(address 0x%x, length %u)",
        owner_rank, address, length));
  }
  if (packed_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region descriptor of rank ", owner_rank, " has no remote key"));
  }
  if (memory_kind != device::MemoryKind::kHost && memory_kind != device::MemoryKind::kDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region descriptor of rank ", owner_rank, " names memory kind ",
        static_cast<int>(memory_kind),
        ", which this build does not know; are all ranks running the same rdmaflow build?"));
  }
  return absl::OkStatus();
}

std::string RemoteRegion::Serialize() const {
  RemoteRegionProto proto;
  proto.set_version(kDescriptorVersion);
  proto.set_backend(backend);
  proto.set_owner_rank(owner_rank);
  proto.set_address(address);
  proto.set_length(length);
  proto.set_packed_key(packed_key);
  proto.set_memory_kind(static_cast<uint32_t>(memory_kind));
  return proto.SerializeAsString();
}

absl::StatusOr<RemoteRegion> RemoteRegion::Parse(absl::string_view bytes) {
  RemoteRegionProto proto;
  if (bytes.empty() ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed remote region descriptor (", bytes.size(),
        " bytes do not decode); was it produced by RemoteRegion::Serialize()?"));
  }
  if (proto.version() != kDescriptorVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region descriptor has version ", proto.version(),
        ", this build understands version ", kDescriptorVersion,
        "; are all ranks running the same rdmaflow build?"));
  }
  RemoteRegion region;
  region.backend = proto.backend();
  region.owner_rank = proto.owner_rank();
  region.address = proto.address();
  region.length = proto.length();
  region.packed_key = proto.packed_key();
  // Checked before the narrowing: 257 must not pass as 1.
  if (proto.memory_kind() > static_cast<uint32_t>(device::MemoryKind::kDevice)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote region descriptor of rank ", proto.owner_rank(), " names memory kind ",
        proto.memory_kind(),
        ", which this build does not know; are all ranks running the same rdmaflow build?"));
  }
  region.memory_kind = static_cast<device::MemoryKind>(proto.memory_kind());
  if (absl::Status status = region.Validate(); !status.ok()) return status;
  return region;
}

std::string RemoteRegion::DebugString() const {
  return absl::StrFormat("%s %sregion of rank %d [0x%x+%u)", backend,
                         memory_kind == device::MemoryKind::kHost ? "" : "device ", owner_rank,
                         address, length);
}

}  // namespace rdmaflow::rdma
