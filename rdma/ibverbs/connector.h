// File: connector.h
// -----------------------------------------------------------------------------
// Connector: the connecting side of ibverbs connections, and the address
// format peers find each other by ("ibverbs2|rank|host|port|device|
// instance", "ibverbs2cm|..." with the connection manager). Connect() checks
// a peer's published address, then creates each of its queue pairs (lanes),
// exchanges their details through the peer's listener (the TCP handshake,
// or rdmacm), connects them, and sets up the flag ring the peer offers on
// the first lane, which carries the endpoint's notifications.
#ifndef RDMAFLOW_RDMA_IBVERBS_CONNECTOR_H_
#define RDMAFLOW_RDMA_IBVERBS_CONNECTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/queue_pair_factory.h"
#include "rdma/ibverbs/registration.h"
#include "rdma/ibverbs/send_queues.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::ibverbs {

// The transport's address(): how peers reach its listener.
std::string FormatAddress(bool use_rdmacm, int rank, absl::string_view host,
                          int port, absl::string_view device,
                          uint64_t instance);

struct ConnectorOptions {
  bool use_rdmacm = false;
  // Ask the peer for a flag ring (notify=flag).
  bool flags = false;
  int qps_per_peer = 1;
  absl::Duration connect_timeout = absl::Seconds(10);
  int ack_timeout = 14;
  int retry_count = 7;
  // The job's token, which every handshake carries.
  std::string job_token;
};

// Single-thread: the thread that drives the transport. The factory,
// registrar and queues must outlive it.
class Connector {
 public:
  Connector(const QueuePairFactory& factory, Registrar& registrar,
            SendQueues& queues, const ConnectorOptions& options)
      : factory_(factory),
        registrar_(registrar),
        queues_(queues),
        options_(options) {}

  // The peer's lanes, connected, the first carrying notifications (not yet
  // added to the send queues). kInvalidArgument for an address that is not
  // of this version, of another rank, or of the other connect= mode;
  // the handshake's or the connection manager's errors (kUnavailable for a
  // stale address answered by another rank).
  absl::StatusOr<std::vector<std::shared_ptr<EndpointState>>> Connect(
      const PeerInfo& peer);

 private:
  // One queue pair and its handshake towards `peer` at host:port (the
  // listener `target`); `notifies`: it carries the endpoint's notifications
  // (may take flags).
  absl::StatusOr<std::shared_ptr<EndpointState>> ConnectLane(
      const PeerInfo& peer, const std::string& host, int port,
      const HandshakeTarget& target, bool notifies);

  const QueuePairFactory& factory_;
  Registrar& registrar_;
  SendQueues& queues_;
  const ConnectorOptions options_;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_CONNECTOR_H_
