// File: rdmacm.h
// -----------------------------------------------------------------------------
// The rdmacm connection path (`connect=rdmacm`): queue pairs connected
// through the kernel's RDMA connection manager (librdmacm) instead of the
// TCP handshake of bootstrap.h. The connection manager resolves the route
// (the GID and path for RoCE, the path record for InfiniBand) from IP
// addresses, exchanges the queue-pair numbers and PSNs, and tells each side
// when the other disconnects or dies (its kernel tears the connection down),
// which is how a dead peer is noticed here.
//
// The queue pairs stay ours (created on our protection domain, completion
// queues and shared receive queue, as with the TCP handshake); librdmacm only
// supplies their RTR/RTS attributes (rdma_init_qp_attr). What the TCP
// handshake sends beside them travels as the connection's private data:
// the request (exactly the 56 bytes a connect request carries) has the
// sender's rank, marker region and notification credit word, a fresh 8-byte
// nonce, and 16 bytes of HMAC-SHA256 keyed with the job token over them and
// the target listener's rank and instance (admission.h); the answer has the
// listener's rank, marker region and ring, and a MAC over them and the
// request's nonce. A request whose MAC does not verify (another job, no
// token, meant for another rank or an earlier process), whose nonce was
// seen, that claims a rank outside the job, ours, or one another process
// holds, that is over a cap, or that is malformed is rejected with the
// reason, logged, and no queue pair is created.
#ifndef RDMAFLOW_RDMA_IBVERBS_RDMACM_H_
#define RDMAFLOW_RDMA_IBVERBS_RDMACM_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/ibverbs/admission.h"
#include "rdma/ibverbs/bootstrap.h"

namespace rdmaflow::rdma::ibverbs {

// What a connect request and its answer carry beside the queue pair.
struct CmPeerInfo {
  int32_t rank = -1;
  uint64_t marker_address = 0;
  uint32_t marker_rkey = 0;
  uint64_t notify_address = 0;
  uint32_t notify_rkey = 0;
  uint32_t notify_slots = 0;  // The answer's ring; 0 in requests.
};

// A request as it arrives: its fields and its nonce.
struct CmRequest {
  CmPeerInfo info;
  uint64_t nonce = 0;
};

// The private data of a request (56 bytes): "RFC2", rank, marker region,
// credit word, nonce, then 16 bytes of RequestMac(job token, over the fields,
// the nonce and `target`). kInternal when the MAC cannot be computed.
absl::StatusOr<std::string> EncodeCmRequest(const CmPeerInfo& info,
                                            uint64_t nonce,
                                            const HandshakeTarget& target,
                                            absl::string_view job_token);
// kInvalidArgument for a malformed request; kPermissionDenied when the MAC
// does not verify for `target` (another job, no token, another target).
absl::StatusOr<CmRequest> DecodeCmRequest(absl::string_view bytes,
                                          absl::string_view job_token,
                                          const HandshakeTarget& target);

// The private data of an answer (52 bytes): "RFA2", rank, marker region,
// ring, then 16 bytes of AnswerMac(job token, over the fields and the
// request's nonce).
absl::StatusOr<std::string> EncodeCmAnswer(const CmPeerInfo& info,
                                           uint64_t request_nonce,
                                           absl::string_view job_token);
// kInvalidArgument for a malformed answer; kPermissionDenied when the MAC
// does not verify (another job, or the answer to another request).
absl::StatusOr<CmPeerInfo> DecodeCmAnswer(absl::string_view bytes,
                                          uint64_t request_nonce,
                                          absl::string_view job_token);

// Moves `qp` (in INIT) to RTR and then RTS with the attributes the
// connection manager has for `id`.
absl::Status ConnectQueuePairWithCm(rdma_cm_id* id, ibv_qp* qp,
                                    uint8_t ack_timeout, uint8_t retry_count);

struct CmListenerOptions {
  std::string bind_address;  // An IPv4 address of the RDMA device's netdev.
  std::string job_token;
  int local_rank = 0;
  int world_size = 0;  // 0: unknown.
  // This listener's random id (published in the transport's address).
  uint64_t instance = 0;
  // Caps, as the TCP listener's (BootstrapListenerOptions): connections
  // accepted and not yet established (beyond it the client is told "busy"
  // and retries), in all, and per claimed rank; nonces remembered.
  int max_pending_queue_pairs = 32;
  int max_connections = 4096;
  int max_connections_per_rank = 32;
  size_t max_remembered_nonces = size_t{1} << 20;
  // responder_resources / initiator_depth of the accepted connections.
  uint8_t rd_atomic = 1;
  uint8_t retry_count = 7;
};

// What the handler returns for a valid request: the queue pair it created
// (connected with ConnectQueuePairWithCm), the answer, and what to release
// when the peer disconnects.
struct CmAccepted {
  uint32_t qp_num = 0;
  CmPeerInfo answer;
  std::unique_ptr<AcceptedPeer> peer;
};

// Listens for connect requests on one thread. Thread-safe; the destructor
// disconnects and releases every accepted peer.
class CmListener {
 public:
  using Handler = std::function<absl::StatusOr<CmAccepted>(
      const CmPeerInfo& request, rdma_cm_id* id)>;

  // kUnavailable when the address cannot be bound (not an RDMA-capable
  // interface's address, with what to check); kInvalidArgument for caps
  // below 1.
  static absl::StatusOr<std::unique_ptr<CmListener>> Start(
      const CmListenerOptions& options, Handler handler);
  ~CmListener();

  int port() const { return port_; }
  int64_t refused() const;

 private:
  CmListener(const CmListenerOptions& options, PeerAdmission admission,
             rdma_event_channel* channel, rdma_cm_id* listen_id, int wake_read,
             int wake_write, int port, Handler handler);
  void Serve();
  void OnEvent(rdma_cm_event* event);
  void Release(rdma_cm_id* id);

  const CmListenerOptions options_;
  rdma_event_channel* const channel_;
  rdma_cm_id* const listen_id_;
  const int wake_read_;
  const int wake_write_;
  const int port_;
  Handler handler_;
  // The listener thread's: accepted connections, what they hold, and the
  // admission accounting (slots are freed in Release()).
  struct Peer {
    std::unique_ptr<AcceptedPeer> accepted;
    int32_t rank = -1;
    bool established = false;
  };
  std::map<rdma_cm_id*, Peer> peers_;
  PeerAdmission admission_;
  mutable absl::Mutex mutex_;
  int64_t refused_ ABSL_GUARDED_BY(mutex_) = 0;
  std::thread thread_;
};

// The active side of one connection: its own event channel, so that the
// owner can ask, without blocking, whether the peer has disconnected.
class CmConnection {
 public:
  // Resolves `host:port` (the listener `target`), lets `make_qp` create the
  // queue pair (in INIT) on the resolved device, sends `request` with a
  // fresh nonce, and once answered moves the queue pair to RTS and returns,
  // with the answer in `answer`. A "busy" refusal is retried (new nonce)
  // with a short back-off until `timeout`. kUnavailable when the peer cannot
  // be reached, refuses (with its reason) or does not answer within
  // `timeout`; kPermissionDenied when its answer's MAC does not verify.
  static absl::StatusOr<std::unique_ptr<CmConnection>> Connect(
      const std::string& host, int port, const HandshakeTarget& target,
      const CmPeerInfo& request, absl::string_view job_token,
      absl::Duration timeout,
      const std::function<absl::StatusOr<ibv_qp*>(rdma_cm_id*)>& make_qp,
      uint8_t ack_timeout, uint8_t retry_count, uint8_t rd_atomic,
      CmPeerInfo* answer);
  ~CmConnection();

  // True once the peer disconnected (or the connection failed); never
  // blocks.
  bool Disconnected();
  // The peer's queue pair, as the connection manager reported it.
  uint32_t remote_qp_num() const { return remote_qp_num_; }

 private:
  CmConnection(rdma_event_channel* channel, rdma_cm_id* id)
      : channel_(channel), id_(id) {}
  // One attempt of Connect() until `deadline`.
  static absl::StatusOr<std::unique_ptr<CmConnection>> Attempt(
      const std::string& host, int port, const HandshakeTarget& target,
      const CmPeerInfo& request, absl::string_view job_token,
      absl::Time deadline,
      const std::function<absl::StatusOr<ibv_qp*>(rdma_cm_id*)>& make_qp,
      uint8_t ack_timeout, uint8_t retry_count, uint8_t rd_atomic,
      CmPeerInfo* answer);
  rdma_event_channel* channel_;
  rdma_cm_id* id_;
  bool disconnected_ = false;
  uint32_t remote_qp_num_ = 0;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_RDMACM_H_
