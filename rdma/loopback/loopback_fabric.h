// File: loopback_fabric.h
// -----------------------------------------------------------------------------
// LoopbackFabric: the in-process "network" that LoopbackTransports of one
// fabric share, like UCX's self transport: a table of live ranks with their
// notification inboxes, and a table of registered regions by remote key.
// Every one-sided access is checked against that table, so a stale or forged
// key is an error and never a stray memcpy.
#ifndef RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_FABRIC_H_
#define RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_FABRIC_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::loopback {

// Thread-safe; shared (shared_ptr) by its transports and their regions.
class LoopbackFabric {
 public:
  static std::shared_ptr<LoopbackFabric> Create();

  uint64_t id() const { return id_; }

  // A rank joins when its transport is created and leaves when it is
  // destroyed. kAlreadyExists if the rank is live.
  absl::Status Join(int rank);
  void Leave(int rank);
  bool IsLive(int rank) const;

  // Region table. Register returns the remote key.
  uint64_t RegisterRegion(int owner_rank, std::byte* base, size_t length);
  void UnregisterRegion(uint64_t key);

  // One-sided copies between `local` and the owner's memory at `address`,
  // validated against the key table. kUnavailable if `peer_rank` has left,
  // kPermissionDenied for an unknown key or an access outside the key's
  // registration. Write delivers `notification` to the peer after the copy.
  absl::Status Write(int from_rank, int peer_rank, const std::byte* local,
                     uint64_t address, uint64_t key, size_t length,
                     std::optional<uint32_t> notification);
  absl::Status Read(int peer_rank, std::byte* local, uint64_t address,
                    uint64_t key, size_t length);
  // The owner's memory itself, checked as Read() checks (ranks share the
  // process): valid while the owner keeps the region.
  absl::StatusOr<std::byte*> Map(int peer_rank, uint64_t address,
                                 uint64_t key, size_t length) const;

  std::optional<Notification> PopNotification(int rank);

 private:
  struct Region {
    int owner_rank;
    std::byte* base;
    size_t length;
  };

  explicit LoopbackFabric(uint64_t id) : id_(id) {}

  // Returns the registered memory for [address, address + length) of
  // `peer_rank` under `key`, or the error.
  absl::StatusOr<std::byte*> Resolve(int peer_rank, uint64_t address,
                                     uint64_t key, size_t length) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const uint64_t id_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::deque<Notification>> inboxes_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace rdmaflow::rdma::loopback

#endif  // RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_FABRIC_H_
