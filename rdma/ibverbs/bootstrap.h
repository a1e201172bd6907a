// File: bootstrap.h
// -----------------------------------------------------------------------------
// The connection handshake of the ibverbs backend. An RC queue pair needs the
// peer's queue-pair number, PSN, LID/GID and MTU before it can carry
// anything, and Transport::Connect() is one-sided (the peer may be doing
// nothing but Progress()). So each transport runs a small TCP listener
// (its address is part of Transport::address(), published through the
// Store). Connect() sends its QueuePairInfo there with a fresh nonce and a
// MAC keyed with the job token over both, the listener's rank and instance
// (admission.h); the listener verifies it, refuses a nonce it has seen, a
// claimed rank that is not a peer or that another process holds, creates
// and connects the peer's side and answers with its own, MAC'd over the
// request's nonce; the caller connects its queue pair and confirms. The
// token itself never travels. See docs/ibverbs.md, "Handshake".
//
// The listener serves every connection at once from one poll() loop, each
// with its own deadline, so an idle or slow client delays nobody else. It
// caps the connections still handshaking and the queue pairs created for
// peers that have not confirmed, and frees a queue pair when its handshake
// is abandoned (no confirmation by the deadline) or when the peer's
// connection closes (the endpoint was destroyed or its process died).
#ifndef RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_
#define RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "rdma/ibverbs/admission.h"

namespace rdmaflow::rdma::ibverbs {

// What one side tells the other about its queue pair. Value type.
struct QueuePairInfo {
  int32_t rank = -1;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  uint8_t mtu = 0;  // enum ibv_mtu
  // An always-readable 64-byte region of the sender, the target of the
  // 1-byte reads that make unsignaled writes complete (ibverbs_endpoint.h).
  uint64_t marker_address = 0;
  uint32_t marker_rkey = 0;
  // Flag notifications (notify_ring.h). From Connect(): the 8-byte word the
  // peer writes how many of our notifications it has consumed into
  // (notify_slots 0). From the listener: its ring of notify_slots 8-byte
  // records for our notifications (0 slots: it takes write-with-immediate
  // only). Peer-given: checked (ValidateNotifyRing) before use.
  uint64_t notify_address = 0;
  uint32_t notify_rkey = 0;
  uint32_t notify_slots = 0;
};

// Sockets are held in a UniqueFd (common/unique_fd.h).
using ::rdmaflow::UniqueFd;

std::string EncodeQueuePairInfo(const QueuePairInfo& info);
// kInvalidArgument for a message of another size or version.
absl::StatusOr<QueuePairInfo> DecodeQueuePairInfo(absl::string_view bytes);

// A request as it arrives: the queue pair, the nonce and the MAC
// (RequestMac over the encoded info, nonce and target).
struct HandshakeRequest {
  QueuePairInfo info;
  uint64_t nonce = 0;
};

// The request of a client with `info` and `nonce` to the listener `target`.
// kInternal when the MAC cannot be computed.
absl::StatusOr<std::string> EncodeHandshakeRequest(
    const QueuePairInfo& info, uint64_t nonce, const HandshakeTarget& target,
    absl::string_view job_token);
// kInvalidArgument for a malformed request (wrong size or version);
// kPermissionDenied when its MAC does not verify for `target` and the token
// (another job, or a request meant for another listener).
absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(
    absl::string_view bytes, absl::string_view job_token,
    const HandshakeTarget& target);

// The listener's answer (after its 'K'): its info and a MAC over it and the
// request's nonce. kInternal when the MAC cannot be computed.
absl::StatusOr<std::string> EncodeHandshakeAnswer(const QueuePairInfo& info,
                                                  uint64_t request_nonce,
                                                  absl::string_view job_token);
// kInvalidArgument for a malformed answer; kPermissionDenied when its MAC
// does not verify (another job, or an answer to another request).
absl::StatusOr<QueuePairInfo> DecodeHandshakeAnswer(
    absl::string_view bytes, uint64_t request_nonce,
    absl::string_view job_token);

struct BootstrapListenerOptions {
  // The IPv4 address to listen on: an address of this host (see
  // ChooseBindAddress), "127.0.0.1" in tests. "0.0.0.0" listens on every
  // interface; only do that on purpose.
  std::string bind_address = "127.0.0.1";
  // Every request must carry a MAC keyed with it (compared in constant
  // time).
  std::string job_token;
  // Named in the log line of a refused token (never the token itself).
  std::string job_token_source;
  // This transport's rank: a request claiming it, or whose MAC names
  // another target rank, is refused.
  int local_rank = 0;
  // This listener's random id (published in the transport's address): a
  // request whose MAC names another is refused.
  uint64_t instance = 0;
  // Ranks are 0..world_size-1 and a request claiming another is refused.
  // 0: unknown, any non-negative rank but ours is accepted.
  int world_size = 0;
  // From accept() to the peer's confirmation. A connection that has not
  // finished by then is closed, and the queue pair created for it freed.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Connections accepted and not yet established (reading the request,
  // awaiting the confirmation, or closing after a refusal). At the cap the
  // listener accepts nothing more until one finishes: later clients wait in
  // the kernel's backlog, bounded by their own timeout.
  int max_handshakes = 64;
  // Queue pairs created for peers that have not confirmed yet. A valid
  // request beyond it is answered "busy" and its client retries.
  int max_pending_queue_pairs = 32;
  // Connections pending and established (each keeps one accepted queue
  // pair). A valid request beyond it is refused.
  int max_connections = 4096;
  // Connections one claimed rank may hold, pending and established (the
  // endpoints a peer opens to us times qps_per_peer). Beyond it refused.
  int max_connections_per_rank = 32;
  // Nonces of verified requests remembered to refuse their replay (see
  // AdmissionOptions).
  size_t max_remembered_nonces = size_t{1} << 20;
};

// What a handler keeps for one accepted peer (for the transport: the peer's
// queue pair). Destroyed by the listener when the handshake is abandoned,
// when the peer's connection closes, or when the listener stops; on the
// listener's thread, or on the thread destroying the listener.
class AcceptedPeer {
 public:
  virtual ~AcceptedPeer() = default;
};

// The handler's answer to a valid request.
struct Accepted {
  QueuePairInfo info;
  std::unique_ptr<AcceptedPeer> peer;  // May be null.
};

// A snapshot of the listener's counters, for tests and logs.
struct BootstrapListenerStats {
  int handshakes = 0;           // Accepted, not yet established.
  int pending_queue_pairs = 0;  // Created, awaiting the confirmation.
  int established = 0;          // Confirmed and open.
  int64_t refused = 0;          // Bad MAC, rank, nonce or message; caps.
  int64_t busy = 0;             // Answered "busy" (queue-pair cap).
  int64_t abandoned = 0;        // Deadline passed, or closed unconfirmed.
  int64_t peers_released = 0;   // AcceptedPeer objects destroyed.
};

// A TCP listener with one thread that answers handshakes with `handler`,
// called only for requests that PeerAdmission admitted (MAC, nonce, claimed
// rank, claimer and caps).
// Thread-safe; the destructor stops the thread and releases every accepted
// peer. Refusals are logged to stderr naming the remote address and the
// claimed rank.
class BootstrapListener {
 public:
  using Handler =
      std::function<absl::StatusOr<Accepted>(const QueuePairInfo& request)>;

  // kInvalidArgument for a bind_address that is not an IPv4 address, or bad
  // caps; kUnavailable when it cannot be bound (with what to set instead).
  static absl::StatusOr<std::unique_ptr<BootstrapListener>> Start(
      const BootstrapListenerOptions& options, Handler handler);
  ~BootstrapListener();

  // The address and port the socket is bound to (from getsockname).
  const std::string& bound_address() const { return bound_address_; }
  int port() const { return port_; }

  BootstrapListenerStats stats() const;
  // Blocks until `predicate` holds for the counters (as the listener thread
  // publishes them after each event) or `timeout` passes; returns whether it
  // holds. For tests.
  bool WaitForStats(
      const std::function<bool(const BootstrapListenerStats&)>& predicate,
      absl::Duration timeout) const;

 private:
  struct Connection;

  BootstrapListener(const BootstrapListenerOptions& options,
                    PeerAdmission admission, int fd, int wake_read,
                    int wake_write, std::string bound_address, int port,
                    Handler handler);
  void Serve();
  // Reads what `c` sent and acts on every complete message.
  void OnReadable(Connection& c);
  void OnMessage(Connection& c, const std::string& body);
  void OnRequest(Connection& c, const std::string& body);
  // Queues an answer ('E' refused or 'B' busy), then closes gracefully.
  void Refuse(Connection& c, char code, const std::string& why,
              bool log = true);
  void Flush(Connection& c);
  void Release(Connection& c);
  void PublishStats();

  const BootstrapListenerOptions options_;
  const int fd_;
  const int wake_read_;
  const int wake_write_;
  const std::string bound_address_;
  const int port_;
  Handler handler_;
  // Touched only by the listener thread.
  std::vector<std::unique_ptr<Connection>> connections_;
  PeerAdmission admission_;
  BootstrapListenerStats counters_;

  mutable absl::Mutex mutex_;
  BootstrapListenerStats published_ ABSL_GUARDED_BY(mutex_);

  std::thread thread_;
};

// The handshake connection stays open while both sides live: when a peer
// process dies its kernel closes it, which is how a dead peer is noticed even
// where the fabric would retry forever (Soft-RoCE towards a destroyed QP).
// Closing it (destroying the endpoint) lets the listener free its side.
struct Handshake {
  QueuePairInfo remote;
  UniqueFd connection;
};

// Connects to `host:port` (the listener `target`), sends `info` with a fresh
// nonce and its MAC, returns the peer's verified answer and the open
// connection. A "busy" answer is retried (with a new nonce) with a short
// back-off until `timeout`. kUnavailable when the peer cannot be reached or
// does not answer within `timeout`; when it refuses (MAC, rank, replay,
// caps, no queue pair), kUnavailable with its reason; kPermissionDenied
// when its answer's MAC does not verify. Then connect the queue pair and
// call ConfirmHandshake().
absl::StatusOr<Handshake> ExchangeQueuePairInfo(const std::string& host,
                                                int port,
                                                const QueuePairInfo& info,
                                                const HandshakeTarget& target,
                                                absl::string_view job_token,
                                                absl::Duration timeout);

// Tells the listener that our queue pair is connected, so it keeps its side;
// without it, the listener frees its queue pair at its deadline.
// kUnavailable when the connection is gone.
absl::Status ConfirmHandshake(const Handshake& handshake,
                              absl::Duration timeout);

// True when the peer end of `connection` has closed (EOF or error); never
// blocks.
bool PeerClosed(int connection);

// Where the handshake listener binds. The first of:
//   1. `configured`, if not empty;
//   2. RDMAFLOW_BIND_ADDR;
//   3. the local address of the route to MASTER_ADDR (a UDP connect() and
//      getsockname(): nothing is sent). When MASTER_ADDR is this host's own
//      name and resolves to a loopback address here (Debian maps the host
//      name to 127.0.1.1), `fallback` if that is not a loopback address;
//   4. `fallback`.
// 1, 2 and 4 may be an IPv4 address, an interface name ("eth0") or a host
// name. `why` says which rule chose it.
struct BindChoice {
  std::string address;  // An IPv4 literal.
  std::string why;
};
// kInvalidArgument naming the variable or option that cannot be resolved.
absl::StatusOr<BindChoice> ChooseBindAddress(absl::string_view configured,
                                             absl::string_view fallback);

// `name` as an IPv4 literal: itself if it is one, else the address of the
// interface so named, else the first IPv4 address it resolves to.
// kInvalidArgument when none applies.
absl::StatusOr<std::string> ResolveIpv4(absl::string_view name);

// The local IPv4 address the kernel would use to reach `host`.
// kUnavailable when there is no route; kInvalidArgument when `host` does not
// resolve.
absl::StatusOr<std::string> LocalAddressTowards(absl::string_view host);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_
