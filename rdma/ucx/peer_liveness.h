// File: peer_liveness.h
// -----------------------------------------------------------------------------
// Process identity and liveness for peers on the same host. UCX 1.13's
// shared-memory transports (posix, sysv) have no peer failure handler, so the
// UCX backend watches same-host peers itself, the way UCX's own keepalive
// does for transports that have one: a peer is gone when its pid no longer
// names a running process started at the same time.
#ifndef RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_
#define RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

struct ProcessIdentity {
  uint32_t pid = 0;
  uint64_t start_time = 0;  // Clock ticks since boot (/proc/<pid>/stat).
  std::string boot_id;      // /proc/sys/kernel/random/boot_id: the host.

  static constexpr size_t kEncodedSize = 4 + 8 + 36;
  std::string Encode() const;  // Exactly kEncodedSize bytes.
  static absl::StatusOr<ProcessIdentity> Decode(absl::string_view bytes);
};

// This process.
ProcessIdentity SelfIdentity();

// True when `peer` runs on this host and has exited (or is a zombie, or its
// pid now names a newer process). False when it is alive or on another host.
bool IsProcessGone(const ProcessIdentity& peer);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_
