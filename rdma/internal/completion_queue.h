// File: completion_queue.h
// -----------------------------------------------------------------------------
// CompletionQueue: finished operations waiting for their callbacks. Backends
// push here from wherever they learn an operation ended (inside a UCX
// callback, at post time for an immediate completion, on Close) and fire from
// Transport::Progress(), which is how callbacks are never inline from Post*()
// and run exactly once.
#ifndef RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_
#define RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "rdma/endpoint.h"

namespace rdmaflow::rdma::internal {

// Single-thread: used by the thread that drives its transport.
class CompletionQueue {
 public:
  void Push(Completion&& done, absl::Status status) {
    Emplace(std::move(done), std::move(status));
  }
  // The same, for an operation counted in `*outstanding` (dropped by one as
  // it fires, before `done` runs) of an owner `keep` holds alive until then
  // (or that the caller keeps alive otherwise, with a null `keep`): no
  // callback of the backend's own wrapped around `done`, so no allocation
  // per operation.
  void Push(Completion&& done, absl::Status status, std::shared_ptr<void> keep,
            size_t* outstanding) {
    Entry& entry = Emplace(std::move(done), std::move(status));
    entry.keep = std::move(keep);
    entry.outstanding = outstanding;
  }

  // Fires every callback queued before the call; callbacks may post (and so
  // queue) more, which the next call fires. Returns how many fired.
  int FireAll() {
    if (ready_.empty()) return 0;
    // The two vectors trade places and keep their capacity: no allocation
    // per operation. A callback that fires the queue again gets a fresh one.
    std::vector<Entry> batch = std::move(spare_);
    spare_.clear();
    batch.swap(ready_);
    for (Entry& entry : batch) {
      if (entry.outstanding != nullptr) --*entry.outstanding;
      std::move(entry.done)(std::move(entry.status));
    }
    const int fired = static_cast<int>(batch.size());
    batch.clear();
    if (batch.capacity() > spare_.capacity()) spare_ = std::move(batch);
    return fired;
  }

  bool empty() const { return ready_.empty(); }

 private:
  struct Entry {
    Completion done;
    absl::Status status;
    std::shared_ptr<void> keep;
    size_t* outstanding = nullptr;
  };

  // Built in place: a Completion moved once, not through a temporary.
  Entry& Emplace(Completion&& done, absl::Status&& status) {
    Entry& entry = ready_.emplace_back();
    entry.done = std::move(done);
    if (!status.ok()) entry.status = std::move(status);
    return entry;
  }
  std::vector<Entry> ready_;
  std::vector<Entry> spare_;
};

}  // namespace rdmaflow::rdma::internal

#endif  // RDMAFLOW_RDMA_INTERNAL_COMPLETION_QUEUE_H_
