// File: ucx_notification_flood_test.cc
// A peer that floods a rank with notified writes nobody polls: the UCX
// transport keeps at most max_queued_notifications of them (the oldest, in
// order), drops and counts the rest, and takes new ones once polled.
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr int kFlood = 600;
constexpr size_t kKept = 64;

absl::StatusOr<std::unique_ptr<UcxTransport>> Make(int rank) {
  UcxTransportOptions options;
  options.rank = rank;
  options.tls = "shm";
  options.max_queued_notifications = kKept;
  return UcxTransport::Create(options);
}

TEST(UcxNotificationFloodTest, UnpolledNotificationsAreBounded) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  const RemoteRegion remote = target.descriptor();
  ASSERT_OK(ab->Prepare(remote));
  int completed = 0;
  int posted = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  // Posts as fast as the endpoint takes them; b progresses (delivering
  // notifications into its queue) but never polls.
  while (completed < kFlood || b->dropped_notifications() < kFlood - kKept) {
    ASSERT_LT(absl::Now(), deadline)
        << completed << " writes completed, " << b->dropped_notifications() << " dropped";
    while (posted < kFlood) {
      absl::Status status = ab->PostWrite({&local, 0, 8}, {&remote, 0, 8},
                                          static_cast<uint32_t>(posted),
                                          [&](absl::Status s) {
                                            EXPECT_OK(s);
                                            ++completed;
                                          });
      if (absl::IsResourceExhausted(status)) break;
      ASSERT_OK(status);
      ++posted;
    }
    ASSERT_OK(a->Progress().status());
    ASSERT_OK(b->Progress().status());
  }
  EXPECT_EQ(b->dropped_notifications(), static_cast<uint64_t>(kFlood - kKept));
  for (uint32_t v = 0; v < kKept; ++v) {
    std::optional<Notification> n = b->PollNotification();
    ASSERT_TRUE(n.has_value()) << v;
    EXPECT_EQ(n->value, v);
    EXPECT_EQ(n->peer_rank, 0);
  }
  EXPECT_FALSE(b->PollNotification().has_value());
  EXPECT_EQ(b->malformed_notifications(), 0u);
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
