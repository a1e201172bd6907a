// The transport conformance suite on UCX: shared memory (posix/sysv/cma)
// and TCP, each chosen through the backend's `tls` option.
#include <memory>
#include <string>
#include <vector>

#include "rdma/testing/transport_conformance.h"
#include "rdma/ucx/ucx_transport.h"

namespace {

using ::rdmaflow::rdma::testing::ConformanceBackend;

ConformanceBackend UcxBackend(const std::string& name, const std::string& tls) {
  ConformanceBackend backend;
  backend.name = name;
  backend.multi_process = true;
  backend.close_needs_peer_progress = tls == "tcp";
  backend.new_group = [tls] {
    return [tls](int rank)
               -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
      rdmaflow::rdma::ucx::UcxTransportOptions options;
      options.rank = rank;
      options.tls = tls;
      options.max_outstanding_per_endpoint = 256;
      return rdmaflow::rdma::ucx::UcxTransport::Create(options);
    };
  };
  return backend;
}

std::vector<ConformanceBackend> UcxBackends() {
  return {UcxBackend("ucx_shm", "shm"), UcxBackend("ucx_tcp", "tcp")};
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Ucx, UcxBackends)
