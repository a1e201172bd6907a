// The transport conformance suite on the in-process loopback backend, as it
// is by default and saying that it orders its writes (orders_writes).
#include <memory>
#include <vector>

#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/transport_conformance.h"

namespace {

using ::rdmaflow::rdma::testing::ConformanceBackend;

ConformanceBackend LoopbackBackend(const char* name, bool orders_writes) {
  ConformanceBackend backend;
  backend.name = name;
  backend.multi_process = false;
  backend.new_group = [orders_writes] {
    auto fabric = rdmaflow::rdma::loopback::LoopbackFabric::Create();
    return [fabric, orders_writes](int rank)
               -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
      rdmaflow::rdma::loopback::LoopbackTransportOptions options;
      options.rank = rank;
      options.fabric = fabric;
      options.max_outstanding_per_endpoint = 64;
      options.orders_writes = orders_writes;
      return rdmaflow::rdma::loopback::LoopbackTransport::Create(options);
    };
  };
  return backend;
}

std::vector<ConformanceBackend> LoopbackBackends() {
  return {LoopbackBackend("loopback", false), LoopbackBackend("loopback_ordered", true)};
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Loopback, LoopbackBackends)
