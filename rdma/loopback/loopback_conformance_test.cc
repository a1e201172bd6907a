// The transport conformance suite on the in-process loopback backend.
#include <memory>
#include <vector>

#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/transport_conformance.h"

namespace rdmaflow::rdma::testing {
namespace {

std::vector<ConformanceBackend> Backends() {
  ConformanceBackend backend;
  backend.name = "loopback";
  backend.multi_process = false;
  backend.new_group = [] {
    auto fabric = loopback::LoopbackFabric::Create();
    return [fabric](int rank) -> absl::StatusOr<std::unique_ptr<Transport>> {
      loopback::LoopbackTransportOptions options;
      options.rank = rank;
      options.fabric = fabric;
      options.max_outstanding_per_endpoint = 64;
      auto transport = loopback::LoopbackTransport::Create(options);
      if (!transport.ok()) return transport.status();
      return std::unique_ptr<Transport>(*std::move(transport));
    };
  };
  return {backend};
}

INSTANTIATE_TEST_SUITE_P(Loopback, TransportConformanceTest,
                         ::testing::ValuesIn(Backends()),
                         ConformanceBackendName);

}  // namespace

int Main(int argc, char** argv) {
  return RunConformanceMain(argc, argv, Backends());
}

}  // namespace rdmaflow::rdma::testing

int main(int argc, char** argv) {
  return rdmaflow::rdma::testing::Main(argc, argv);
}
