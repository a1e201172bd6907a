// File: testing/rank_threads.cc
#include "rdma/testing/rank_threads.h"

#include <memory>
#include <thread>

#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/in_memory_store.h"

namespace rdmaflow::rdma::testing {

std::vector<absl::Status> RunRankThreads(
    int world_size,
    const std::function<absl::Status(int, rdma::Transport&, rdma::Store&)>&
        body,
    const RankThreadsOptions& options) {
  return RunRankThreadsOwning(
      world_size,
      [&](int rank, std::unique_ptr<rdma::Transport>& transport, rdma::Store& store) {
        return body(rank, *transport, store);
      },
      options);
}

std::vector<absl::Status> RunRankThreadsOwning(
    int world_size,
    const std::function<absl::Status(int, std::unique_ptr<rdma::Transport>&,
                                     rdma::Store&)>& body,
    const RankThreadsOptions& options) {
  auto fabric = rdma::loopback::LoopbackFabric::Create();
  rdma::testing::InMemoryStore store;
  std::vector<absl::Status> results(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      rdma::loopback::LoopbackTransportOptions loopback;
      loopback.rank = rank;
      loopback.fabric = fabric;
      loopback.max_outstanding_per_endpoint = options.max_outstanding_per_endpoint;
      loopback.orders_writes = options.orders_writes;
      auto created = rdma::loopback::LoopbackTransport::Create(loopback);
      if (!created.ok()) {
        results[rank] = created.status();
        return;
      }
      std::unique_ptr<rdma::Transport> transport = *std::move(created);
      results[rank] = body(rank, transport, store);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace rdmaflow::rdma::testing
