// File: notify_inbox.h
// -----------------------------------------------------------------------------
// NotifyInbox: where the ibverbs transport's notifications arrive. WRITE
// WITH IMMEDIATE consumes a receive of the shared receive queue, which it
// keeps posted (reposted in batches, a few doorbells per queue); flag
// notifications land in a ring per accepted peer (notify_ring.h), polled
// here, whose consumed count goes back to the peer as a credit. Both kinds
// reach the owner through one queue (PollNotification()), tagged with the
// sender's rank: the rank of an accepted queue pair, as the listener
// recorded it (AcceptedPeers), never what the peer claims in the data.
#ifndef RDMAFLOW_RDMA_IBVERBS_NOTIFY_INBOX_H_
#define RDMAFLOW_RDMA_IBVERBS_NOTIFY_INBOX_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/endpoint.h"
#include "rdma/internal/notify_ring.h"
#include "rdma/internal/notification_queue.h"
#include "rdma/memory_region.h"

namespace rdmaflow::rdma::ibverbs {

class AcceptedPeers;  // accepted_peers.h

// A ring the listener offered an accepted peer; the queue pair is the
// accepted one, which also carries the credits back.
struct AcceptedRing {
  uint32_t qpn = 0;
  int rank = -1;
  ibv_qp* qp = nullptr;     // Owned by AcceptedPeers (accepted, then retired).
  uint32_t max_inline = 0;  // What its queue pair writes inline.
  MemoryRegion memory;      // The records, then the credit's source word.
  std::optional<NotifyRingReader> reader;
  uint64_t credit_address = 0;
  uint32_t credit_rkey = 0;
};

// Single-thread: the thread that drives the transport's Progress().
class NotifyInbox {
 public:
  // `srq` and `recv_cq` (the shared receive queue and the completion queue
  // of every queue pair's receives) and `peers` must outlive it. `rank` is
  // ours, for messages; `slots` the records of each ring.
  NotifyInbox(int rank, ibv_srq* srq, ibv_cq* recv_cq, AcceptedPeers& peers,
              uint32_t slots);

  NotifyInbox(const NotifyInbox&) = delete;
  NotifyInbox& operator=(const NotifyInbox&) = delete;

  // Posts the first `receives` receives (the queue's depth).
  absl::Status Start(int receives);

  // Takes the rings the listener added, and its ranks of accepted queue
  // pairs (from AcceptedPeers::TakeChanges()).
  void Adopt(std::vector<std::unique_ptr<AcceptedRing>> rings,
             absl::flat_hash_map<uint32_t, int> ranks);
  // Forgets queue pairs that retired (their rings go).
  void Drop(const std::vector<uint32_t>& qpns);

  // Takes the receive completion queue's notifications and reposts the
  // receives consumed, in batches; how many receives were consumed.
  absl::StatusOr<int> PollReceives();
  // Delivers what arrived in the rings and sends the credits due; how many
  // records.
  int PollRings();
  bool HasRings() const { return !rings_.empty(); }

  std::optional<Notification> Pop() { return notifications_.Pop(); }
  bool empty() const { return notifications_.empty(); }

 private:
  // Posts `count` receives in linked batches; `count` drops by each batch
  // taken, so a failure leaves only the rest to post.
  absl::Status PostReceives(int& count);
  // False when the post failed (logged).
  bool SendCredit(AcceptedRing& ring, uint64_t consumed);

  const int rank_;
  ibv_srq* const srq_;
  ibv_cq* const recv_cq_;
  AcceptedPeers& peers_;
  const uint32_t slots_;
  std::vector<std::unique_ptr<AcceptedRing>> rings_;
  // A copy of the listener's ranks of accepted queue pairs, refreshed with
  // its changes (and when a receive names a queue pair it lacks).
  absl::flat_hash_map<uint32_t, int> ranks_;
  // Receives consumed and not yet reposted, and the batch that reposts them.
  int unposted_receives_ = 0;
  int repost_batch_ = 1;
  ::rdmaflow::rdma::internal::NotificationQueue notifications_{
      "rdmaflow ibverbs",
      ::rdmaflow::rdma::internal::NotificationQueue::kDefaultCapacity};
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_NOTIFY_INBOX_H_
