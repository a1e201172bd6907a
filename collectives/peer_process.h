// File: peer_process.h
// -----------------------------------------------------------------------------
// PeerProcess: single-copy reads of another process's ordinary memory on
// the same host, with process_vm_readv (Linux cross-memory attach, "CMA").
// What a host collective uses for a member's range that is not in any
// shared mapping: a tensor the caller allocated itself. The kernel copies
// straight from the peer's pages into ours, one copy, no staging.
//
// Each process publishes a ProcessToken: its pid and the address of 16
// random bytes in its memory. Open() reads those bytes (the probe: the
// kernel, the ptrace policy, a seccomp filter or another PID namespace may
// refuse, or the pid may name another process) and every Read() reads them
// again in the same system call, so a peer that died and whose pid went to
// another process is an error, never another process's bytes.
//
//   ASSIGN_OR_RETURN(PeerProcess peer,
//                    PeerProcess::Open(ParseProcessToken(text), "rank 2"));
//   RETURN_IF_ERROR(peer.Read(address, bytes, local));
//
// Every field of a peer's token and every address it publishes is
// untrusted: a forged one fails a Read() (kDataLoss), or reads memory of a
// process that published its token: the forger's own, or (a copied token)
// another member's, which its peers may read anyway once they all agreed.
// Never a process that published none.
#ifndef RDMAFLOW_COLLECTIVES_PEER_PROCESS_H_
#define RDMAFLOW_COLLECTIVES_PEER_PROCESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::collectives {

struct ProcessToken {
  int64_t pid = 0;
  uint64_t address = 0;  // of `token`, in that process
  uint64_t token[2] = {0, 0};
};

// This process's token (random, made at the first call, and again in a
// child after fork()). Thread-safe.
ProcessToken OwnProcessToken();

// "pid=<n> at=<hex> token=<hex>.<hex>", and back (kInvalidArgument for any
// other text).
std::string FormatProcessToken(const ProcessToken& token);
absl::StatusOr<ProcessToken> ParseProcessToken(absl::string_view text);

// Thread-compatible; copyable (a pid and a token: nothing is held open).
class PeerProcess {
 public:
  // Probes `peer` (`name` says who it is in errors: "rank 2"): reads its
  // token. kUnimplemented saying why when it cannot be read (the kernel
  // refuses: EPERM names the ptrace policy; ESRCH: no such process here,
  // e.g. another PID namespace) or is not the published one (another
  // process holds that pid).
  static absl::StatusOr<PeerProcess> Open(const ProcessToken& peer, std::string name);

  // Reads `bytes` at `remote` in the peer into `local` (ours), checking the
  // token in the same call. kDataLoss for a range that wraps or is not
  // mapped in the peer (a forged or stale address); kUnavailable when the
  // peer's process is gone (its pid names none, or another process).
  // `local` holds unspecified bytes after an error.
  absl::Status Read(uint64_t remote, size_t bytes, std::byte* local) const;

  const std::string& name() const { return name_; }
  int64_t pid() const { return peer_.pid; }

 private:
  PeerProcess(const ProcessToken& peer, std::string name)
      : peer_(peer), name_(std::move(name)) {}

  ProcessToken peer_;
  std::string name_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_PEER_PROCESS_H_
