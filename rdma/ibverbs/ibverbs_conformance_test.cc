// The transport conformance suite on the native verbs backend. Without an
// RDMA device every case skips with the reason; tools/rdma_tests.sh runs it
// inside a Soft-RoCE VM, where it must pass whole.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "rdma/ibverbs/ibverbs_transport.h"
#include "rdma/testing/transport_conformance.h"

namespace {

using ::rdmaflow::rdma::testing::ConformanceBackend;

std::vector<ConformanceBackend> IbverbsBackends() {
  ConformanceBackend backend;
  backend.name = "ibverbs";
  backend.multi_process = true;
  backend.new_group = [] {
    return [](int rank)
               -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
      rdmaflow::rdma::ibverbs::IbverbsTransportOptions options;
      options.rank = rank;
      if (const char* device = std::getenv("RDMAFLOW_RXE_DEV")) {
        options.device.device = device;
      }
      // Emulated CPUs (the rxe VM) answer slowly: 2^16 * 4 us per retry.
      options.ack_timeout = 16;
      return rdmaflow::rdma::ibverbs::IbverbsTransport::Create(options);
    };
  };
  return {backend};
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Ibverbs, IbverbsBackends)
