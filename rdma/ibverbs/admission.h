// File: admission.h
// -----------------------------------------------------------------------------
// What both connection listeners of the ibverbs backend (the TCP handshake of
// bootstrap.h and the rdmacm listener of rdmacm.h) decide the same way about
// a request, once its job-token MAC verified: the handshake MAC itself (a
// fresh nonce and the target listener in what it covers), the claimed rank,
// replayed nonces, the claim's binding to one process, and the caps. See
// docs/security.md, "The ibverbs connection set-up".
#ifndef RDMAFLOW_RDMA_IBVERBS_ADMISSION_H_
#define RDMAFLOW_RDMA_IBVERBS_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ibverbs {

// Bytes of a handshake MAC: HMAC-SHA256 truncated to 128 bits (as TLS and
// IPsec truncate theirs), so that an rdmacm request fits its 56 bytes.
inline constexpr size_t kHandshakeMacBytes = 16;

// A fresh 64-bit value from the kernel's random source (getrandom(2)).
// kInternal when the kernel gives none.
absl::StatusOr<uint64_t> RandomNonce();

// Who a request is for: the listener's rank and the random id it picked at
// start (published in its address, so a request captured on the way to an
// earlier process at the same address does not verify here).
struct HandshakeTarget {
  int32_t rank = -1;
  uint64_t instance = 0;
};

// The MAC of a request: HMAC-SHA256(job token, label | fields | nonce |
// target rank | target instance), truncated. kInternal when OpenSSL fails.
absl::StatusOr<std::string> RequestMac(absl::string_view job_token,
                                       absl::string_view label,
                                       absl::string_view fields, uint64_t nonce,
                                       const HandshakeTarget& target);
// The MAC of an answer: over its fields and the nonce of the request it
// answers, so that it cannot be replayed to another request.
absl::StatusOr<std::string> AnswerMac(absl::string_view job_token,
                                      absl::string_view label,
                                      absl::string_view fields,
                                      uint64_t request_nonce);
// kPermissionDenied (with the usual causes) unless `presented` equals
// `expected`, compared in constant time.
absl::Status CheckMac(absl::string_view expected, absl::string_view presented);

// The ranks a listener of `local_rank` in a job of `world_size` (0: unknown)
// accepts: kInvalidArgument naming the rank and why otherwise.
absl::Status CheckClaimedRank(int32_t rank, int local_rank, int world_size);

struct AdmissionOptions {
  int local_rank = 0;
  int world_size = 0;  // 0: unknown.
  // Connections admitted and not yet established. A request beyond it is
  // kUnavailable ("busy"): the client retries.
  int max_pending = 32;
  // Connections admitted in all (pending and established).
  int max_connections = 4096;
  // Connections one claimed rank may hold (pending and established): the
  // endpoints a peer may open to us times their queue pairs each.
  int max_connections_per_rank = 32;
  // Verified nonces remembered, oldest forgotten first (8 bytes and a hash
  // slot each). Only requests whose MAC verified enter, so only holders of
  // the job token move this window.
  size_t max_remembered_nonces = size_t{1} << 20;
};

// The caps a listener's options give (the TCP handshake's and rdmacm's
// options name them alike).
template <typename ListenerOptions>
AdmissionOptions AdmissionOptionsOf(const ListenerOptions& options) {
  AdmissionOptions caps;
  caps.local_rank = options.local_rank;
  caps.world_size = options.world_size;
  caps.max_pending = options.max_pending_queue_pairs;
  caps.max_connections = options.max_connections;
  caps.max_connections_per_rank = options.max_connections_per_rank;
  caps.max_remembered_nonces = options.max_remembered_nonces;
  return caps;
}

// What a request claims, once its MAC verified. `claimer` identifies the
// requesting process: its address and the marker region it named (one per
// transport, the same on every one of its queue pairs).
struct Claim {
  int32_t rank = -1;
  uint64_t nonce = 0;
  std::string claimer;
};

// The claimer of a request from `address` (the peer's IP) naming the marker
// region (`marker_address`, `marker_rkey`): every queue pair of one
// transport names the same one, and two processes (even on one host, on
// one device) name different ones.
std::string ClaimerOf(absl::string_view address, uint64_t marker_address,
                      uint32_t marker_rkey);

// The accounting of one listener. Thread-compatible: the listener's thread
// owns it.
class PeerAdmission {
 public:
  // kInvalidArgument for caps below 1.
  static absl::StatusOr<PeerAdmission> Create(const AdmissionOptions& options);

  // Admits `claim` as a pending connection, or says why not:
  //   kPermissionDenied  its nonce was seen before (a replay);
  //   kInvalidArgument   the rank is not a peer (CheckClaimedRank);
  //   kAlreadyExists     the rank holds connections from another claimer
  //                      (two processes claim one rank);
  //   kResourceExhausted the rank or the listener is at its cap;
  //   kUnavailable       max_pending connections are pending: retry.
  // The nonce is remembered whatever the outcome, so a refused request
  // cannot be replayed later either.
  absl::Status Admit(const Claim& claim);
  // An admitted connection of `rank` became established.
  void Established(int32_t rank);
  // An admitted connection of `rank` is gone (refused later, abandoned, or
  // torn down). When the rank holds none any more, its binding to a claimer
  // ends: a restarted process may claim it.
  void Release(int32_t rank, bool established);

  int pending() const { return pending_; }
  int connections() const { return connections_; }
  int connections_of(int32_t rank) const;
  size_t remembered_nonces() const { return nonces_.size(); }

 private:
  explicit PeerAdmission(const AdmissionOptions& options)
      : options_(options) {}
  struct Holder {
    std::string claimer;
    int connections = 0;
  };
  bool Remember(uint64_t nonce);

  AdmissionOptions options_;
  absl::flat_hash_set<uint64_t> nonces_;
  std::deque<uint64_t> nonce_order_;  // Oldest first.
  bool forgot_ = false;               // Logged once.
  std::map<int32_t, Holder> holders_;
  int pending_ = 0;
  int connections_ = 0;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_ADMISSION_H_
