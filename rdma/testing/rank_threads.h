// File: testing/rank_threads.h
// -----------------------------------------------------------------------------
// Runs the ranks of a job as threads of one process, each with its own
// LoopbackTransport on a shared fabric and a shared InMemoryStore (gloo's
// `spawn`, tensorpipe's ThreadPeerGroup). For unit tests of the runtime and
// the strategies.
#ifndef RDMAFLOW_RDMA_TESTING_RANK_THREADS_H_
#define RDMAFLOW_RDMA_TESTING_RANK_THREADS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

struct RankThreadsOptions {
  // Operations each loopback endpoint accepts in flight before posts are
  // refused with kResourceExhausted (a full send queue).
  size_t max_outstanding_per_endpoint = 256;
  // LoopbackTransportOptions::orders_writes of every rank.
  bool orders_writes = false;
};

// Runs `body(rank, transport, store)` for every rank on its own thread and
// returns every rank's status, by rank.
std::vector<absl::Status> RunRankThreads(
    int world_size,
    const std::function<absl::Status(int rank, rdma::Transport& transport,
                                     rdma::Store& store)>& body,
    const RankThreadsOptions& options = {});

// The same, with the body owning its transport: resetting it is how a rank
// dies in the middle of a job (its peers' operations on it then fail with
// kUnavailable).
std::vector<absl::Status> RunRankThreadsOwning(
    int world_size,
    const std::function<absl::Status(int rank, std::unique_ptr<rdma::Transport>& transport,
                                     rdma::Store& store)>& body,
    const RankThreadsOptions& options = {});

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_RANK_THREADS_H_
