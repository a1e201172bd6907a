// File: builtin_transports.h
// -----------------------------------------------------------------------------
// RegisterBuiltinTransports: registers every backend compiled into this build
// ("ucx", "ibverbs", "loopback"), each through its own Register...Transport
// function; CreateBuiltinTransport makes one by name.
#ifndef RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_
#define RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/transport.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma {

absl::Status RegisterBuiltinTransports(TransportRegistry& registry);

// Creates built-in transport `name` for `rank` with "key=value,..." backend
// parameters. kNotFound listing the names; kInvalidArgument for malformed or
// unknown parameters; the backend's errors.
absl::StatusOr<std::unique_ptr<Transport>> CreateBuiltinTransport(
    const std::string& name, const std::string& params, int rank);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BUILTIN_TRANSPORTS_H_
