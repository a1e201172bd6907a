// File: registration.cc
#include "rdma/ibverbs/registration.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

constexpr char kKeyMagic[] = "IBV1";
constexpr int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

absl::Status RegistrationError(int err, size_t bytes) {
  if (err == ENOMEM || err == EPERM || err == EFAULT || err == EAGAIN) {
    rlimit limit{};
    getrlimit(RLIMIT_MEMLOCK, &limit);
    std::string current = limit.rlim_cur == RLIM_INFINITY
                              ? std::string("unlimited")
                              : absl::StrCat(limit.rlim_cur / 1024, " KiB");
    return absl::ResourceExhaustedError(absl::StrCat(
        "ibv_reg_mr of ", bytes, " bytes failed: ", std::strerror(err),
        ". The locked-memory limit (ulimit -l) is ", current,
        "; raise it (ulimit -l unlimited; memlock in "
        "/etc/security/limits.conf; LimitMEMLOCK= for systemd; "
        "--ulimit memlock=-1 for containers)"));
  }
  return VerbsError(err, absl::StrCat("ibv_reg_mr of ", bytes, " bytes"));
}

}  // namespace

std::string PackKey(uint32_t rkey) {
  std::string key(kKeyMagic, 4);
  key.append(reinterpret_cast<const char*>(&rkey), sizeof(rkey));
  return key;
}

absl::StatusOr<uint32_t> UnpackKey(absl::string_view packed, int peer_rank) {
  if (packed.size() != 8 || packed.substr(0, 4) != kKeyMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the remote key of rank ", peer_rank,
        "'s region is not an ibverbs key (", packed.size(), " bytes)"));
  }
  uint32_t rkey;
  std::memcpy(&rkey, packed.data() + 4, sizeof(rkey));
  return rkey;
}

absl::StatusOr<MemoryRegion> Registrar::RegisterMemory(void* data, size_t bytes,
                                                       void* owned) {
  MrPtr mr(ibv_reg_mr(context_->pd.get(), data, bytes, kAccess));
  if (mr == nullptr) {
    int err = errno;
    std::free(owned);
    return RegistrationError(err, bytes);
  }
  RemoteRegion descriptor;
  descriptor.backend = kBackend;
  descriptor.owner_rank = rank_;
  descriptor.address = reinterpret_cast<uintptr_t>(data);
  descriptor.length = bytes;
  descriptor.packed_key = PackKey(mr->rkey);
  auto registration =
      std::make_unique<VerbsRegistration>(context_, std::move(mr), owned);
  return MemoryRegion(static_cast<std::byte*>(data), bytes,
                      std::move(descriptor), std::move(registration));
}

absl::StatusOr<MemoryRegion> Registrar::RegisterDmaBuf(const DmaBufSpan& span) {
  if (span.fd < 0 || span.bytes == 0 || span.address == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("registering device memory: the dma-buf span (descriptor ",
                     span.fd, ", ", span.bytes, " bytes at device address ",
                     span.address, ") is empty or has no descriptor"));
  }
  MrPtr mr(ibv_reg_dmabuf_mr(context_->pd.get(), span.offset, span.bytes,
                             span.address, span.fd, kAccess));
  if (mr == nullptr) {
    return DmaBufRegistrationError(errno, context_->device.name, span.bytes);
  }
  RemoteRegion descriptor;
  descriptor.backend = kBackend;
  descriptor.owner_rank = rank_;
  descriptor.address = span.address;
  descriptor.length = span.bytes;
  descriptor.packed_key = PackKey(mr->rkey);
  descriptor.memory_kind = device::MemoryKind::kDevice;
  auto registration =
      std::make_unique<VerbsRegistration>(context_, std::move(mr), nullptr);
  return MemoryRegion(reinterpret_cast<std::byte*>(span.address), span.bytes,
                      std::move(descriptor), std::move(registration));
}

absl::StatusOr<MemoryRegion> Registrar::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("cannot allocate a 0-byte region");
  }
  if (bytes > SIZE_MAX - kPage) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* memory = std::aligned_alloc(kPage, rounded);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  std::memset(memory, 0, rounded);
  return RegisterMemory(memory, bytes, memory);
}

absl::StatusOr<MemoryRegion> Registrar::Register(absl::Span<std::byte> memory) {
  if (memory.data() == nullptr || memory.empty()) {
    return absl::InvalidArgumentError("cannot register an empty span");
  }
  return RegisterMemory(memory.data(), memory.size(), nullptr);
}

}  // namespace rdmaflow::rdma::ibverbs
