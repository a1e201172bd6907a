// File: queue_pair_factory.h
// -----------------------------------------------------------------------------
// QueuePairFactory: what both sides of an ibverbs connection need to make
// one of the transport's queue pairs (on its device and protection domain,
// its completion queues and shared receive queue, with its queue-pair
// options) and to describe it to the peer (with the transport's marker
// word, which the peer's completion markers read). The connecting side
// (connector.h) and the accepting side (acceptor.h) both use it.
#ifndef RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_FACTORY_H_
#define RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_FACTORY_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/ibverbs/verbs_raii.h"
#include "rdma/memory_region.h"

namespace rdmaflow::rdma::ibverbs {

// A random 24-bit initial packet sequence number.
uint32_t RandomPsn();

// Immutable once built: usable from the listener's thread too.
struct QueuePairFactory {
  std::shared_ptr<VerbsContext> context;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_srq* srq = nullptr;
  const MemoryRegion* marker = nullptr;  // 64 readable bytes, then scratch
  QueuePairOptions options;
  int rank = 0;

  const Device& device() const { return context->device; }
  // A queue pair in the INIT state; `inline_bytes`: what the device grants.
  absl::StatusOr<QpPtr> Create(uint32_t* inline_bytes) const;
  // What the peer needs to connect to `qp` (LocalInfo), with our marker.
  QueuePairInfo Describe(const ibv_qp* qp, uint32_t psn) const;
  // kUnavailable, naming both, unless the connection manager routes `id`
  // through this transport's device.
  absl::Status CheckCmDevice(rdma_cm_id* id, int peer_rank) const;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_QUEUE_PAIR_FACTORY_H_
