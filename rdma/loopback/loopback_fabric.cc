#include "rdma/loopback/loopback_fabric.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow::rdma::loopback {

std::shared_ptr<LoopbackFabric> LoopbackFabric::Create() {
  static std::atomic<uint64_t> next_id{1};
  return std::shared_ptr<LoopbackFabric>(new LoopbackFabric(next_id++));
}

absl::Status LoopbackFabric::Join(int rank) {
  absl::MutexLock lock(&mu_);
  if (!inboxes_.try_emplace(rank).second) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " already has a live transport on loopback fabric ",
        id_, "; each rank may create one"));
  }
  return absl::OkStatus();
}

void LoopbackFabric::Leave(int rank) {
  absl::MutexLock lock(&mu_);
  inboxes_.erase(rank);
}

bool LoopbackFabric::IsLive(int rank) const {
  absl::ReaderMutexLock lock(&mu_);
  return inboxes_.contains(rank);
}

uint64_t LoopbackFabric::RegisterRegion(int owner_rank, std::byte* base,
                                        size_t length) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = next_key_++;
  regions_[key] = Region{owner_rank, base, length};
  return key;
}

void LoopbackFabric::UnregisterRegion(uint64_t key) {
  absl::MutexLock lock(&mu_);
  regions_.erase(key);
}

absl::StatusOr<std::byte*> LoopbackFabric::Resolve(int peer_rank,
                                                   uint64_t address,
                                                   uint64_t key,
                                                   size_t length) const {
  if (!inboxes_.contains(peer_rank)) {
    return absl::UnavailableError(absl::StrCat(
        "peer rank ", peer_rank,
        " is gone (its loopback transport was destroyed)"));
  }
  auto it = regions_.find(key);
  if (it == regions_.end() || it->second.owner_rank != peer_rank) {
    return absl::PermissionDeniedError(absl::StrCat(
        "remote key ", key, " is not registered at rank ", peer_rank,
        " (the region was freed, or the descriptor is stale or forged)"));
  }
  const Region& region = it->second;
  const auto base = reinterpret_cast<uintptr_t>(region.base);
  if (address < base || address - base > region.length ||
      length > region.length - (address - base)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "access [0x%x+%u) is outside the region registered under key %u at "
        "rank %d",
        address, length, key, peer_rank));
  }
  return reinterpret_cast<std::byte*>(address);
}

absl::Status LoopbackFabric::Write(int from_rank, int peer_rank,
                                   const std::byte* local, uint64_t address,
                                   uint64_t key, size_t length,
                                   std::optional<uint32_t> notification) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::byte*> target = Resolve(peer_rank, address, key, length);
  if (!target.ok()) return target.status();
  std::memmove(*target, local, length);
  if (notification.has_value()) {
    inboxes_[peer_rank].push_back(Notification{from_rank, *notification});
  }
  return absl::OkStatus();
}

absl::Status LoopbackFabric::Read(int peer_rank, std::byte* local,
                                  uint64_t address, uint64_t key,
                                  size_t length) {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<std::byte*> source = Resolve(peer_rank, address, key, length);
  if (!source.ok()) return source.status();
  std::memmove(local, *source, length);
  return absl::OkStatus();
}

absl::StatusOr<std::byte*> LoopbackFabric::Map(int peer_rank,
                                               uint64_t address, uint64_t key,
                                               size_t length) const {
  absl::ReaderMutexLock lock(&mu_);
  return Resolve(peer_rank, address, key, length);
}

std::optional<Notification> LoopbackFabric::PopNotification(int rank) {
  absl::MutexLock lock(&mu_);
  auto it = inboxes_.find(rank);
  if (it == inboxes_.end() || it->second.empty()) return std::nullopt;
  Notification notification = it->second.front();
  it->second.pop_front();
  return notification;
}

}  // namespace rdmaflow::rdma::loopback
