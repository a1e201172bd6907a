// File: peer_liveness.h
// -----------------------------------------------------------------------------
// Process identity and liveness for peers on the same host. UCX 1.13's
// shared-memory transports (posix, sysv) have no peer failure handler, so the
// UCX backend watches same-host peers itself, the way UCX's own keepalive
// does for transports that have one: a peer is gone when its pid no longer
// names a running process started at the same time.
//
// A pid only means something inside its PID namespace, and only through a
// /proc mounted for that namespace: two ranks in two containers on one node
// share the boot id but neither the pid numbering nor /proc. So the identity
// names the PID namespace, and the pid is checked only when the peer's is
// ours and our /proc shows it (CanWatchProcess). Any other peer is watched
// like one on another host, by UCX's peer error handling.
#ifndef RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_
#define RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// A Linux namespace: (st_dev, st_ino) of /proc/self/ns/<kind>, which
// namespaces(7) says identifies it. Zero inode: unknown.
struct NamespaceId {
  uint64_t device = 0;
  uint64_t inode = 0;

  bool known() const { return inode != 0; }
  friend bool operator==(const NamespaceId& a, const NamespaceId& b) {
    return a.device == b.device && a.inode == b.inode;
  }
  friend bool operator!=(const NamespaceId& a, const NamespaceId& b) {
    return !(a == b);
  }
};

struct ProcessIdentity {
  // getpid(): a number in `pid_namespace` only.
  uint32_t pid = 0;
  // Clock ticks since boot (/proc/self/stat field 22). 0 when the /proc
  // mounted in the process's view is not its own PID namespace's (e.g. after
  // `unshare --pid --fork` without --mount-proc), so its pid cannot be
  // checked there.
  uint64_t start_time = 0;
  // /proc/sys/kernel/random/boot_id: the host. Blank when unknown.
  std::string boot_id;
  NamespaceId pid_namespace;

  static constexpr size_t kBootIdSize = 36;
  static constexpr size_t kEncodedSize = 4 + 8 + kBootIdSize + 16;
  std::string Encode() const;  // Exactly kEncodedSize bytes.
  // Strict: the bytes come from a peer through the store. kInvalidArgument,
  // naming the field, when the size or a field is malformed.
  static absl::StatusOr<ProcessIdentity> Decode(absl::string_view bytes);
};

// This process.
ProcessIdentity SelfIdentity();

// True when `self` can watch `peer` by pid: same host, same PID namespace,
// and both see that namespace's own /proc. False for a peer on another host
// or in another PID namespace (another container), or when either side's
// /proc cannot be trusted; such a peer's death is unknowable here.
bool CanWatchProcess(const ProcessIdentity& self, const ProcessIdentity& peer);

// For a peer that CanWatchProcess(): true once it has exited or begun to
// (no such pid, a zombie, exiting (PF_EXITING: it may have closed its files
// already, so its shared memory no longer attaches), or the pid now names a
// newer process).
bool IsProcessGone(const ProcessIdentity& peer);

// IsProcessGone's reading of a /proc/<pid>/stat line, for tests: true when
// malformed, a zombie, exiting, or started at another time than
// `start_time`.
bool StatSaysGone(absl::string_view stat_line, uint64_t start_time);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_PEER_LIVENESS_H_
