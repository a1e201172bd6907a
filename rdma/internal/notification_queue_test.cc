// File: notification_queue_test.cc
// The backends' bounded notification queue against a flood: it never holds
// more than its capacity, drops and counts what does not fit, keeps the
// order of what it holds, and takes new ones again once polled.
#include "rdma/internal/notification_queue.h"

#include "gtest/gtest.h"

namespace rdmaflow::rdma::internal {
namespace {

TEST(NotificationQueueTest, AFloodIsBoundedAndCounted) {
  NotificationQueue queue("test", 4);
  for (uint32_t v = 0; v < 1000; ++v) {
    const bool kept = queue.Push(Notification{1, v});
    EXPECT_EQ(kept, v < 4) << v;
    EXPECT_LE(queue.size(), 4u);
  }
  EXPECT_EQ(queue.dropped(), 996u);
  for (uint32_t v = 0; v < 4; ++v) {
    std::optional<Notification> n = queue.Pop();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->value, v) << "the oldest first, the flood's tail dropped";
    EXPECT_EQ(n->peer_rank, 1);
  }
  EXPECT_FALSE(queue.Pop().has_value());
  EXPECT_TRUE(queue.Push(Notification{2, 7}));
  EXPECT_EQ(queue.Pop()->value, 7u);
}

TEST(NotificationQueueTest, MalformedOnesAreCountedNotQueued) {
  NotificationQueue queue("test");
  EXPECT_EQ(queue.capacity(), NotificationQueue::kDefaultCapacity);
  for (int i = 0; i < 100000; ++i) queue.CountMalformed("3 bytes");
  EXPECT_EQ(queue.malformed(), 100000u);
  EXPECT_TRUE(queue.empty());
}

TEST(NotificationQueueTest, ACapacityOfZeroStillHoldsOne) {
  NotificationQueue queue("test", 0);
  EXPECT_TRUE(queue.Push(Notification{0, 1}));
  EXPECT_FALSE(queue.Push(Notification{0, 2}));
  EXPECT_EQ(queue.dropped(), 1u);
}

}  // namespace
}  // namespace rdmaflow::rdma::internal
