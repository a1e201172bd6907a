// File: ucx_probe.h
// -----------------------------------------------------------------------------
// ProbeUcx: what UCX offers on this machine, as `ucx_info -d` lists it: its
// version and each transport with its devices (UCT's memory domains and
// their resources), plus advice where a piece rdmaflow uses is missing. It
// opens memory domains only: no context, worker or endpoint.
#ifndef RDMAFLOW_RDMA_UCX_UCX_PROBE_H_
#define RDMAFLOW_RDMA_UCX_UCX_PROBE_H_

#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ucx {

TransportProbeReport ProbeUcx();

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_PROBE_H_
