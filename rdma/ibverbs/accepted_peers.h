// File: accepted_peers.h
// -----------------------------------------------------------------------------
// AcceptedPeers: the queue pairs the handshake listener (TCP or rdmacm)
// created for peers that connected to this transport, shared between the
// listener's thread, which adds and retires them, and the thread that
// drives Progress(), which takes the changes: the sender's rank of each
// queue pair (for notifications), the rings offered to them, and the
// retired queue pairs to destroy once their last completions are taken.
#ifndef RDMAFLOW_RDMA_IBVERBS_ACCEPTED_PEERS_H_
#define RDMAFLOW_RDMA_IBVERBS_ACCEPTED_PEERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/notify_inbox.h"
#include "rdma/ibverbs/verbs_raii.h"

namespace rdmaflow::rdma::ibverbs {

// Thread-safe.
class AcceptedPeers {
 public:
  // What the listener changed since the last TakeChanges().
  struct Changes {
    // Queue pairs retired (in the error state): destroy them once the
    // receive queue and their rings were drained.
    std::vector<std::pair<uint32_t, QpPtr>> retiring;
    // Rings offered to peers accepted since.
    std::vector<std::unique_ptr<AcceptedRing>> rings;
    // Every accepted queue pair's sender rank.
    absl::flat_hash_map<uint32_t, int> ranks;
  };

  AcceptedPeers() = default;
  AcceptedPeers(const AcceptedPeers&) = delete;
  AcceptedPeers& operator=(const AcceptedPeers&) = delete;

  // The listener's thread: a queue pair connected for `rank`, with the ring
  // offered to it (or null). Returns the handle the listener keeps: its
  // destruction (the peer's handshake connection closed) retires the queue
  // pair.
  std::unique_ptr<AcceptedPeer> Add(uint32_t qpn, int rank, QpPtr qp,
                                    std::unique_ptr<AcceptedRing> ring);
  // In the error state it takes no more writes; completions it produced
  // before are already in the receive queue, which Progress() drains before
  // it destroys the queue pair and forgets its rank.
  void Retire(uint32_t qpn);

  // The Progress() thread. False, without locking, when nothing changed.
  bool TakeChanges(Changes& changes);
  // Every accepted queue pair's sender rank, now.
  absl::flat_hash_map<uint32_t, int> Ranks() const;
  // The retired queue pairs `qpns` are destroyed: forget their ranks.
  void Forget(const std::vector<uint32_t>& qpns);

  size_t accepted() const;
  int64_t retired() const;

 private:
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<uint32_t, int> rank_of_qp_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<uint32_t, QpPtr> accepted_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::pair<uint32_t, QpPtr>> retired_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<AcceptedRing>> new_rings_ ABSL_GUARDED_BY(mutex_);
  int64_t retired_count_ ABSL_GUARDED_BY(mutex_) = 0;
  // Set when the listener changed something: TakeChanges() locks only then.
  std::atomic<bool> changed_{false};
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_ACCEPTED_PEERS_H_
