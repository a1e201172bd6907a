// File: acceptor.h
// -----------------------------------------------------------------------------
// Acceptor: the accepting side of ibverbs connections. The handshake
// listener (bootstrap.h) or the rdmacm listener (rdmacm.h) calls it, on its
// own thread, for each peer's verified request: it creates the queue pair,
// connects it to the peer's, offers a ring for the peer's flag
// notifications where the peer named a credit word (and we take flags),
// and records it all in AcceptedPeers for Progress() to take.
#ifndef RDMAFLOW_RDMA_IBVERBS_ACCEPTOR_H_
#define RDMAFLOW_RDMA_IBVERBS_ACCEPTOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/ibverbs/accepted_peers.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/queue_pair_factory.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/ibverbs/registration.h"

namespace rdmaflow::rdma::ibverbs {

struct AcceptorOptions {
  // Offer accepted peers a ring for flag notifications, of this many records.
  bool offer_rings = false;
  uint32_t notify_slots = 256;
  // For queue pairs the connection manager connects.
  int ack_timeout = 14;
  int retry_count = 7;
};

// Thread-safe as its callers need: one listener thread calls it while the
// transport's thread runs; what it shares goes through AcceptedPeers. The
// factory, registrar and peers must outlive it.
class Acceptor {
 public:
  Acceptor(const QueuePairFactory& factory, Registrar& registrar,
           AcceptedPeers& peers, const AcceptorOptions& options)
      : factory_(factory),
        registrar_(registrar),
        peers_(peers),
        options_(options) {}

  // A TCP handshake's request.
  absl::StatusOr<Accepted> Accept(const QueuePairInfo& request);
  // An rdmacm connect request on `id` (which must come in through our
  // device: kUnavailable naming both otherwise).
  absl::StatusOr<CmAccepted> AcceptCm(const CmPeerInfo& request,
                                      rdma_cm_id* id);

 private:
  // What both answer with: creates the queue pair, lets `connect` move it to
  // RTS, offers a ring where the peer named a credit word.
  absl::StatusOr<Accepted> AcceptQueuePair(
      int rank, uint64_t credit_address, uint32_t credit_rkey,
      absl::FunctionRef<absl::Status(ibv_qp*, uint32_t psn)> connect);

  const QueuePairFactory& factory_;
  Registrar& registrar_;
  AcceptedPeers& peers_;
  const AcceptorOptions options_;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_ACCEPTOR_H_
