// File: notification_queue.cc
#include "rdma/internal/notification_queue.h"

#include <cstdio>

namespace rdmaflow::rdma::internal {
namespace {

// 1, 2, 4, 8, ...: the counts at which a repeated event is logged.
bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

bool NotificationQueue::Push(Notification n) {
  if (queue_.size() >= capacity_) {
    if (IsPowerOfTwo(++dropped_)) {
      std::fprintf(stderr,
                   "%s: dropped %llu notification(s) (latest from rank %d): %zu are waiting "
                   "that nothing polled (is a component not taking its notifications, or is "
                   "a peer flooding this rank?)\n",
                   owner_.c_str(), static_cast<unsigned long long>(dropped_), n.peer_rank,
                   queue_.size());
    }
    return false;
  }
  queue_.push_back(n);
  return true;
}

std::optional<Notification> NotificationQueue::Pop() {
  if (queue_.empty()) return std::nullopt;
  Notification n = queue_.front();
  queue_.pop_front();
  return n;
}

void NotificationQueue::CountMalformed(const std::string& why) {
  if (IsPowerOfTwo(++malformed_)) {
    std::fprintf(stderr, "%s: refused %llu malformed notification(s), the latest: %s\n",
                 owner_.c_str(), static_cast<unsigned long long>(malformed_), why.c_str());
  }
}

}  // namespace rdmaflow::rdma::internal
