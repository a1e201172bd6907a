#include "rdma/builtin_transports.h"

#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_transport.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma {

absl::Status RegisterBuiltinTransports(TransportRegistry& registry) {
  RETURN_IF_ERROR(ucx::RegisterUcxTransport(registry));
  RETURN_IF_ERROR(ibverbs::RegisterIbverbsTransport(registry));
  RETURN_IF_ERROR(loopback::RegisterLoopbackTransport(registry));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> CreateBuiltinTransport(
    const std::string& name, const std::string& params, int rank) {
  TransportRegistry registry;
  RETURN_IF_ERROR(RegisterBuiltinTransports(registry));
  TransportConfig config;
  config.rank = rank;
  ASSIGN_OR_RETURN(config.params, ParseTransportParams(params));
  return registry.Create(name, config);
}

}  // namespace rdmaflow::rdma
