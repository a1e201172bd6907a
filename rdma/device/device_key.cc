#include "rdma/device/device_key.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "rdma/device/device_key.pb.h"

namespace rdmaflow::rdma::device_path {

// FNV-1a, 64 bits, over the key's fields in a fixed layout.
uint64_t Fnv1a(const void* bytes, size_t size, uint64_t hash) {
  const auto* at = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ at[i]) * 0x100000001b3ULL;
  return hash;
}

uint64_t KeyCheck(absl::string_view host, int32_t device, absl::string_view handle,
                  uint64_t offset, uint64_t allocation_size) {
  uint64_t hash = kFnvBasis;
  auto mix = [&hash](const void* data, size_t bytes) { hash = Fnv1a(data, bytes, hash); };
  const uint64_t host_bytes = host.size();
  mix(&host_bytes, sizeof(host_bytes));
  mix(host.data(), host.size());
  mix(&device, sizeof(device));
  mix(handle.data(), handle.size());
  mix(&offset, sizeof(offset));
  mix(&allocation_size, sizeof(allocation_size));
  return hash;
}

std::string DeviceKey::Serialize() const {
  DeviceKeyProto proto;
  proto.set_version(kVersion);
  proto.set_host(host);
  proto.set_device(device);
  proto.set_ipc_handle(std::string(reinterpret_cast<const char*>(handle.bytes.data()),
                                   handle.bytes.size()));
  proto.set_offset(offset);
  proto.set_allocation_size(allocation_size);
  proto.set_check(KeyCheck(proto.host(), proto.device(), proto.ipc_handle(), offset,
                        allocation_size));
  return proto.SerializeAsString();
}

absl::StatusOr<DeviceKey> DeviceKey::Parse(absl::string_view bytes, uint64_t length) {
  DeviceKeyProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("a device region's key does not parse");
  }
  if (proto.version() != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device region's key has version ", proto.version(), ", not ", kVersion,
        ": are all ranks running the same rdmaflow?"));
  }
  if (proto.host().empty() || proto.host().size() > kMaxHostBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device region's key names a host identity of ", proto.host().size(),
        " bytes (1 to ", kMaxHostBytes, ")"));
  }
  if (proto.device() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device region's key names device ", proto.device()));
  }
  if (proto.ipc_handle().size() != device::IpcHandle::kBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device region's key carries a ", proto.ipc_handle().size(),
        "-byte IPC handle, not ", device::IpcHandle::kBytes));
  }
  if (proto.offset() > proto.allocation_size() ||
      length > proto.allocation_size() - proto.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device region's key puts its ", length, " bytes at offset ", proto.offset(),
        " of a ", proto.allocation_size(), "-byte allocation"));
  }
  if (proto.check() != KeyCheck(proto.host(), proto.device(), proto.ipc_handle(), proto.offset(),
                             proto.allocation_size())) {
    return absl::InvalidArgumentError(
        "a device region's key does not match its check word: corrupted on its way?");
  }
  DeviceKey key;
  key.host = proto.host();
  key.device = proto.device();
  std::memcpy(key.handle.bytes.data(), proto.ipc_handle().data(), device::IpcHandle::kBytes);
  key.offset = proto.offset();
  key.allocation_size = proto.allocation_size();
  return key;
}

absl::StatusOr<std::string> ThisHost() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(in, id) || id.empty() || id.size() > DeviceKey::kMaxHostBytes) {
    return absl::UnavailableError(
        "cannot read this host's boot id (/proc/sys/kernel/random/boot_id): the device "
        "path needs it to tell same-host peers");
  }
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace rdmaflow::rdma::device_path
