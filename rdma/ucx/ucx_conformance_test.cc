// The transport conformance suite on UCX: shared memory (posix/sysv/cma)
// and TCP, each chosen through the backend's `tls` option.
#include <memory>
#include <string>
#include <vector>

#include "rdma/testing/transport_conformance.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma::testing {
namespace {

ConformanceBackend UcxBackend(const std::string& name, const std::string& tls) {
  ConformanceBackend backend;
  backend.name = name;
  backend.multi_process = true;
  backend.new_group = [tls] {
    return [tls](int rank) -> absl::StatusOr<std::unique_ptr<Transport>> {
      ucx::UcxTransportOptions options;
      options.rank = rank;
      options.tls = tls;
      options.max_outstanding_per_endpoint = 256;
      auto transport = ucx::UcxTransport::Create(options);
      if (!transport.ok()) return transport.status();
      return std::unique_ptr<Transport>(*std::move(transport));
    };
  };
  return backend;
}

std::vector<ConformanceBackend> Backends() {
  return {UcxBackend("ucx_shm", "shm"), UcxBackend("ucx_tcp", "tcp")};
}

INSTANTIATE_TEST_SUITE_P(Ucx, TransportConformanceTest,
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
