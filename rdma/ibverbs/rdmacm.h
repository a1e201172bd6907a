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
// the request (at most 56 bytes) carries the sender's rank, marker region and
// notification credit word, and 24 bytes of an HMAC-SHA256 keyed with the job
// token over them; the answer the listener's rank, marker region and ring,
// with its own MAC. A request whose MAC does not verify (another job, no
// token), that claims a rank outside the job or ours, or that is malformed
// is rejected with the reason, logged, and no queue pair is created.
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

// The private data of a request (56 bytes) or an answer (60 bytes): the
// fields, then 24 bytes of HMAC-SHA256(job token, "request"|"answer" +
// fields). kInternal when the MAC cannot be computed.
absl::StatusOr<std::string> EncodeCmPeerInfo(const CmPeerInfo& info, bool request,
                                             absl::string_view job_token);
// kInvalidArgument for a malformed message; kPermissionDenied when the MAC
// does not verify (another job, or no token).
absl::StatusOr<CmPeerInfo> DecodeCmPeerInfo(absl::string_view bytes,
                                            bool request,
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
  // interface's address, with what to check).
  static absl::StatusOr<std::unique_ptr<CmListener>> Start(
      const CmListenerOptions& options, Handler handler);
  ~CmListener();

  int port() const { return port_; }
  int64_t refused() const;

 private:
  CmListener(const CmListenerOptions& options, rdma_event_channel* channel,
             rdma_cm_id* listen_id, int wake_read, int wake_write, int port,
             Handler handler);
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
  // The listener thread's: accepted connections and what they hold.
  std::map<rdma_cm_id*, std::unique_ptr<AcceptedPeer>> peers_;
  mutable absl::Mutex mutex_;
  int64_t refused_ ABSL_GUARDED_BY(mutex_) = 0;
  std::thread thread_;
};

// The active side of one connection: its own event channel, so that the
// owner can ask, without blocking, whether the peer has disconnected.
class CmConnection {
 public:
  // Resolves `host:port`, lets `make_qp` create the queue pair (in INIT) on
  // the resolved device, sends `request`, and once answered moves the queue
  // pair to RTS and returns, with the answer in `answer`. kUnavailable when
  // the peer cannot be reached, refuses (with its reason) or does not
  // answer within `timeout`; kPermissionDenied when its answer's MAC does
  // not verify.
  static absl::StatusOr<std::unique_ptr<CmConnection>> Connect(
      const std::string& host, int port, const CmPeerInfo& request,
      absl::string_view job_token, absl::Duration timeout,
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
  rdma_event_channel* channel_;
  rdma_cm_id* id_;
  bool disconnected_ = false;
  uint32_t remote_qp_num_ = 0;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_RDMACM_H_
