// File: notification_queue.h
// -----------------------------------------------------------------------------
// NotificationQueue: the notifications a backend has received and
// PollNotification() has not returned yet, bounded. A peer decides how many
// notifications it sends, and a process may have no component that takes
// them (the c10d engine's loop has no notification handler): an unbounded
// queue would grow until the process runs out of memory. At `capacity`
// waiting notifications a new one is dropped and counted, and the first drop
// (then each one that doubles the count) is logged with what to check; a
// protocol that needed it then ends at its deadline naming the peer. The
// same rate limit applies to malformed notifications the backend refuses,
// so that a flood of them cannot flood the log either.
#ifndef RDMAFLOW_RDMA_INTERNAL_NOTIFICATION_QUEUE_H_
#define RDMAFLOW_RDMA_INTERNAL_NOTIFICATION_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "rdma/transport.h"

namespace rdmaflow::rdma::internal {

// Single-thread: used by the thread that drives its transport.
class NotificationQueue {
 public:
  // 64 Ki notifications (1 MiB of queue): far more than any protocol of
  // ours leaves waiting (each waits for its notifications).
  static constexpr size_t kDefaultCapacity = size_t{1} << 16;

  // `owner` names the transport in log lines ("rdmaflow ucx rank 3").
  explicit NotificationQueue(std::string owner, size_t capacity = kDefaultCapacity)
      : owner_(std::move(owner)), capacity_(capacity == 0 ? 1 : capacity) {}

  // Queues `n`; false (and counted) when `capacity` are already waiting.
  bool Push(Notification n);
  // The oldest waiting notification.
  std::optional<Notification> Pop();
  // A notification refused as malformed: counted, and logged with `why`
  // on the first time and each time the count doubles.
  void CountMalformed(const std::string& why);

  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t malformed() const { return malformed_; }

 private:
  const std::string owner_;
  const size_t capacity_;
  std::deque<Notification> queue_;
  uint64_t dropped_ = 0;
  uint64_t malformed_ = 0;
};

}  // namespace rdmaflow::rdma::internal

#endif  // RDMAFLOW_RDMA_INTERNAL_NOTIFICATION_QUEUE_H_
