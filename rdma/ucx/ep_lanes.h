// File: ep_lanes.h
// -----------------------------------------------------------------------------
// What an endpoint's lanes, as ucp_ep_print_info() lists them, say about the
// order in which its operations reach the peer. UCX 1.13 offers no query for
// an endpoint's transports, and its fence orders only operations of one
// lane: a flag may follow its payload without a flush only where every
// operation of the endpoint travels over one ordered connection.
//
// Why one TCP lane orders puts in UCX 1.13: its TCP transport has no put
// of its own that UCP's RMA uses short or buffered (no PUT_SHORT, no
// PUT_BCOPY), so every put, 8 bytes or a megabyte, goes as software RMA:
// active messages on the endpoint's am lane, copied in post order (a
// request that meets a busy send buffer queues behind the one holding it,
// and the transport hands its queue the buffer as it drains), and the
// peer's worker copies each put into place as it reads it off the socket.
// That was read in UCX 1.13's source; other versions (whose new protocols
// choose differently) are not assumed to keep it.
#ifndef RDMAFLOW_RDMA_UCX_EP_LANES_H_
#define RDMAFLOW_RDMA_UCX_EP_LANES_H_

#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// True when `ep_info` (ucp_ep_print_info's text) lists exactly one lane and
// that lane is UCX's TCP transport ("lane[0]:  0:tcp/eth0.0 md[0] ..."): its
// puts and active messages then go, in the order they were posted, down one
// TCP connection, and the peer's worker places each before it reads the
// next. False for anything else: shared memory, several lanes (TCP over two
// interfaces stripes large puts over both), a connection manager's lane, or
// text this version does not recognise.
bool OneTcpLane(absl::string_view ep_info);

// Whether UCX `major`.`minor` is a version whose one-TCP-lane endpoints
// were checked to place puts in post order (above): 1.13 only.
bool TcpLaneOrdersPuts(unsigned major, unsigned minor);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_EP_LANES_H_
