// The transport conformance suite on the in-process loopback backend.
#include <memory>
#include <vector>

#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/transport_conformance.h"

namespace {

using ::rdmaflow::rdma::testing::ConformanceBackend;

std::vector<ConformanceBackend> LoopbackBackends() {
  ConformanceBackend backend;
  backend.name = "loopback";
  backend.multi_process = false;
  backend.new_group = [] {
    auto fabric = rdmaflow::rdma::loopback::LoopbackFabric::Create();
    return [fabric](int rank)
               -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
      rdmaflow::rdma::loopback::LoopbackTransportOptions options;
      options.rank = rank;
      options.fabric = fabric;
      options.max_outstanding_per_endpoint = 64;
      return rdmaflow::rdma::loopback::LoopbackTransport::Create(options);
    };
  };
  return {backend};
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Loopback, LoopbackBackends)
