// File: ibverbs_probe.h
// -----------------------------------------------------------------------------
// ProbeIbverbs: the RDMA devices this machine has, as ibv_devinfo shows
// them, with the port and GID the ibverbs transport would choose on each
// (OpenDevice's description), or why it cannot use one. It opens the
// devices only: no protection domain, queue pair or registration.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_PROBE_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_PROBE_H_

#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ibverbs {

TransportProbeReport ProbeIbverbs();

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_PROBE_H_
