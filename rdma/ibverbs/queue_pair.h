// File: queue_pair.h
// -----------------------------------------------------------------------------
// RC queue pairs: creation, and the RESET -> INIT -> RTR -> RTS transitions
// with the peer's QueuePairInfo.
#ifndef RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_H_
#define RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/device.h"
#include "rdma/ibverbs/verbs_raii.h"

namespace rdmaflow::rdma::ibverbs {

struct QueuePairOptions {
  uint32_t send_depth = 512;
  uint32_t max_inline = 64;  // Requested; the device may grant less.
  // Local ACK timeout, 4.096 us * 2^timeout, and retries before
  // IBV_WC_RETRY_EXC_ERR (the time it takes to declare a peer dead).
  uint8_t timeout = 14;
  uint8_t retry_count = 7;
};

// A reliable-connected QP on `pd`, its sends completing on `send_cq`, its
// receives taken from `srq`, in state INIT. `granted_inline` is what the
// device allows inline.
absl::StatusOr<QpPtr> CreateQueuePair(const Device& device, ibv_pd* pd,
                                      ibv_cq* send_cq, ibv_cq* recv_cq,
                                      ibv_srq* srq,
                                      const QueuePairOptions& options,
                                      uint32_t* granted_inline);

// INIT -> RTR -> RTS towards `remote`. `local_psn` is the PSN this side
// starts sending with (sent to the peer in our QueuePairInfo).
absl::Status ConnectQueuePair(ibv_qp* qp, const Device& device,
                              uint32_t local_psn, const QueuePairInfo& remote,
                              const QueuePairOptions& options);

// Moves `qp` to the error state: outstanding work requests are flushed.
absl::Status StopQueuePair(ibv_qp* qp);

// Our side of the handshake for `qp`.
QueuePairInfo LocalInfo(const Device& device, int rank, const ibv_qp* qp,
                        uint32_t psn);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_H_
