// File: builtin_transports.h
// -----------------------------------------------------------------------------
// RegisterBuiltinTransports: registers every backend compiled into this build
// ("ucx", "loopback"), each through its own Register...Transport function.
#ifndef RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_
#define RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_

#include "absl/status/status.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma {

absl::Status RegisterBuiltinTransports(TransportRegistry& registry);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_
