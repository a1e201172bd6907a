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

absl::Status RemoteRegion::Invalid(Field field) const {
  switch (field) {
    case Field::kBackend:
      return absl::InvalidArgumentError(
          "remote region descriptor has no backend name; was it produced by "
          "MemoryRegion::descriptor()?");
    case Field::kOwnerRank:
      return absl::InvalidArgumentError(absl::StrCat(
          "remote region descriptor has a negative owner rank (", owner_rank, ")"));
    case Field::kLength:
      return absl::InvalidArgumentError(
          absl::StrCat("remote region descriptor of rank ", owner_rank, " has length 0"));
    case Field::kAddress:
      return absl::InvalidArgumentError(absl::StrFormat(
          "remote region descriptor of rank %d wraps around the address space "
          "(address 0x%x, length %u)",
          owner_rank, address, length));
    case Field::kPackedKey:
      return absl::InvalidArgumentError(absl::StrCat(
          "remote region descriptor of rank ", owner_rank, " has no remote key"));
    case Field::kMemoryKind:
      return absl::InvalidArgumentError(absl::StrCat(
          "remote region descriptor of rank ", owner_rank, " names memory kind ",
          static_cast<int>(memory_kind),
          ", which this build does not know; are all ranks running the same rdmaflow build?"));
  }
  return absl::InternalError("RemoteRegion::Invalid: unknown field");
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
