// File: loopback_pair.h
// -----------------------------------------------------------------------------
// Two ranks on one loopback fabric, each connected to the other: the fixture
// of the one-sided layer's unit tests (a slot ring, a credit writer, a
// progress loop between rank 0 and rank 1). Destroying a transport makes its
// rank a dead peer; drop the endpoints that point at it first.
#ifndef RDMAFLOW_RDMA_TESTING_LOOPBACK_PAIR_H_
#define RDMAFLOW_RDMA_TESTING_LOOPBACK_PAIR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rdma/endpoint.h"
#include "rdma/loopback/loopback_transport.h"

namespace rdmaflow::rdma::testing {

struct LoopbackPair {
  std::vector<std::unique_ptr<loopback::LoopbackTransport>> transports;  // ranks 0, 1
  std::unique_ptr<Endpoint> to_1;  // rank 0's endpoint to rank 1
  std::unique_ptr<Endpoint> to_0;  // rank 1's endpoint to rank 0

  // `orders_writes`: LoopbackTransportOptions::orders_writes of both ranks.
  static absl::StatusOr<LoopbackPair> Create(bool orders_writes = false);
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_LOOPBACK_PAIR_H_
