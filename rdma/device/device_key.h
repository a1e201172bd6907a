// File: device_key.h
// -----------------------------------------------------------------------------
// The remote key of a device region (device_key.proto): the owner's host,
// device, the IPC handle of the allocation the region lies in and where in
// it the region starts. A key read from a peer is untrusted: Parse copies
// and checks it once, and only the copy is used.
#ifndef RDMAFLOW_RDMA_DEVICE_DEVICE_KEY_H_
#define RDMAFLOW_RDMA_DEVICE_DEVICE_KEY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device_runtime.h"

namespace rdmaflow::rdma::device_path {

struct DeviceKey {
  static constexpr uint32_t kVersion = 2;
  // Longest host identity accepted from a peer.
  static constexpr size_t kMaxHostBytes = 64;

  std::string host;
  int32_t device = 0;
  device::IpcHandle handle;
  uint64_t offset = 0;
  uint64_t allocation_size = 0;

  std::string Serialize() const;

  // Decodes a peer's key of a region of `length` bytes: kInvalidArgument
  // naming the field for bytes that do not parse, another version, a host
  // identity that is empty or too long, a negative device, a handle that is
  // not 64 bytes, a region that does not lie inside the allocation
  // (offset + length > allocation_size, overflow-safe), or a check word that
  // does not match the fields (a corrupted key).
  static absl::StatusOr<DeviceKey> Parse(absl::string_view bytes, uint64_t length);
};

// FNV-1a, 64 bits, of `bytes`, continuing from `hash`: the check words of
// the device path's records (keys, staging directory entries).
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;
uint64_t Fnv1a(const void* bytes, size_t size, uint64_t hash = kFnvBasis);

// The check word of a key's fields (DeviceKeyProto.check). Catches a key
// corrupted on its way; a forger computes it as well.
uint64_t KeyCheck(absl::string_view host, int32_t device, absl::string_view handle,
                  uint64_t offset, uint64_t allocation_size);

// This host's identity: the kernel's boot id, which every process of the
// host shares (network namespaces too) and no other host has.
// kUnavailable where /proc does not give it.
absl::StatusOr<std::string> ThisHost();

}  // namespace rdmaflow::rdma::device_path

#endif  // RDMAFLOW_RDMA_DEVICE_DEVICE_KEY_H_
