// File: completion_queue.h
// -----------------------------------------------------------------------------
// CompletionQueue: finished operations waiting for their callbacks. Backends
// push here from wherever they learn an operation ended (inside a UCX
// callback, at post time for an immediate completion, on Close) and fire from
// Transport::Progress(), which is how callbacks are never inline from Post*()
// and run exactly once.
#ifndef RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_
#define RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "rdma/endpoint.h"

namespace rdmaflow::rdma::internal {

// Single-thread: used by the thread that drives its transport.
class CompletionQueue {
 public:
  void Push(Completion done, absl::Status status) {
    ready_.emplace_back(std::move(done), std::move(status));
  }

  // Fires every callback queued before the call; callbacks may post (and so
  // queue) more, which the next call fires. Returns how many fired.
  int FireAll() {
    if (ready_.empty()) return 0;
    std::vector<std::pair<Completion, absl::Status>> batch;
    batch.swap(ready_);
    for (auto& [done, status] : batch) std::move(done)(std::move(status));
    return static_cast<int>(batch.size());
  }

  bool empty() const { return ready_.empty(); }

 private:
  std::vector<std::pair<Completion, absl::Status>> ready_;
};

}  // namespace rdmaflow::rdma::internal

#endif  // RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_
