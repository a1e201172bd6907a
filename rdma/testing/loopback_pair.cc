// File: loopback_pair.cc
#include "rdma/testing/loopback_pair.h"

#include <utility>

#include "common/status_macros.h"
#include "rdma/loopback/loopback_fabric.h"

namespace rdmaflow::rdma::testing {

absl::StatusOr<LoopbackPair> LoopbackPair::Create(bool orders_writes) {
  LoopbackPair pair;
  auto fabric = loopback::LoopbackFabric::Create();
  for (int rank : {0, 1}) {
    loopback::LoopbackTransportOptions options;
    options.rank = rank;
    options.fabric = fabric;
    options.orders_writes = orders_writes;
    ASSIGN_OR_RETURN(auto transport, loopback::LoopbackTransport::Create(options));
    pair.transports.push_back(std::move(transport));
  }
  ASSIGN_OR_RETURN(pair.to_1, pair.transports[0]->Connect({1, pair.transports[1]->address()}));
  ASSIGN_OR_RETURN(pair.to_0, pair.transports[1]->Connect({0, pair.transports[0]->address()}));
  return pair;
}

}  // namespace rdmaflow::rdma::testing
