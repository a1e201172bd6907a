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
  void Push(Completion&& done, absl::Status status) {
    ready_.emplace_back(std::move(done), std::move(status));
  }

  // Fires every callback queued before the call; callbacks may post (and so
  // queue) more, which the next call fires. Returns how many fired.
  int FireAll() {
    if (ready_.empty()) return 0;
    // The two vectors trade places and keep their capacity: no allocation
    // per operation. A callback that fires the queue again gets a fresh one.
    std::vector<std::pair<Completion, absl::Status>> batch = std::move(spare_);
    spare_.clear();
    batch.swap(ready_);
    for (auto& [done, status] : batch) std::move(done)(std::move(status));
    const int fired = static_cast<int>(batch.size());
    batch.clear();
    if (batch.capacity() > spare_.capacity()) spare_ = std::move(batch);
    return fired;
  }

  bool empty() const { return ready_.empty(); }

 private:
  std::vector<std::pair<Completion, absl::Status>> ready_;
  std::vector<std::pair<Completion, absl::Status>> spare_;
};

}  // namespace rdmaflow::rdma::internal

#endif  // RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_
