// File: testing/connect_counter.h
// -----------------------------------------------------------------------------
// ConnectCounter: a test decorator over a Transport that counts the
// endpoints connected through it, so that a test can prove what a component
// costs in connections (one endpoint per peer on shared links, whatever the
// protocols), not only what the component says it costs.
//
//   ConnectCounter counting(transport);
//   ... give `counting` to the component, run it ...
//   EXPECT_EQ(counting.connected(), peers);
#ifndef RDMAFLOW_RDMA_TESTING_CONNECT_COUNTER_H_
#define RDMAFLOW_RDMA_TESTING_CONNECT_COUNTER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "rdma/endpoint.h"
#include "rdma/testing/transport_wrapper.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

// Thread-compatible, like the transport it wraps (which must outlive it).
class ConnectCounter final : public TransportWrapper {
 public:
  explicit ConnectCounter(Transport& inner) : TransportWrapper(inner) {}

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const PeerInfo& peer) override {
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = TransportWrapper::Connect(peer);
    if (endpoint.ok()) ++connected_;
    return endpoint;
  }

  // Endpoints connected so far (Connect() calls that succeeded).
  int64_t connected() const { return connected_; }

 private:
  int64_t connected_ = 0;
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_CONNECT_COUNTER_H_
