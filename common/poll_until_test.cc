#include "common/poll_until.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "common/timer_slack.h"
#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

TEST(ScopedTimerSlackTest, NarrowsTheThreadsSlackForItsScopeAndRestoresIt) {
  const absl::Duration before = ScopedTimerSlack::Current();
  ASSERT_GT(before, absl::ZeroDuration()) << "the kernel does not report a timer slack";
  {
    ScopedTimerSlack precise(absl::Microseconds(3));
    EXPECT_EQ(ScopedTimerSlack::Current(), absl::Microseconds(3));
    {
      ScopedTimerSlack inner(absl::Nanoseconds(500));
      EXPECT_EQ(ScopedTimerSlack::Current(), absl::Nanoseconds(500));
    }
    EXPECT_EQ(ScopedTimerSlack::Current(), absl::Microseconds(3));
  }
  EXPECT_EQ(ScopedTimerSlack::Current(), before);
}

TEST(PollUntilTest, ReturnsTrueAtThePollThatSucceeds) {
  int polls = 0;
  absl::StatusOr<bool> reached = PollUntil(
      [&]() -> absl::StatusOr<bool> { return ++polls == 40; }, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(reached.ok()) << reached.status();
  EXPECT_TRUE(*reached);
  EXPECT_EQ(polls, 40);
}

TEST(PollUntilTest, NapsWithTheNarrowSlackOnlyAfterTheEagerPollsAndRestoresIt) {
  const absl::Duration before = ScopedTimerSlack::Current();
  PollOptions options;
  options.eager_polls = 4;
  options.slack = absl::Microseconds(2);
  std::vector<absl::Duration> seen;
  absl::StatusOr<bool> reached = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        seen.push_back(ScopedTimerSlack::Current());
        return seen.size() == 8;
      },
      absl::Now() + absl::Seconds(30), options);
  ASSERT_TRUE(reached.ok()) << reached.status();
  ASSERT_EQ(seen.size(), 8u);
  // Polls 1-5 come before the first nap (the fifth ends the eager ones);
  // the later ones follow naps.
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(seen[i], before) << "poll " << i + 1;
  for (size_t i = 5; i < 8; ++i) EXPECT_EQ(seen[i], absl::Microseconds(2)) << "poll " << i + 1;
  EXPECT_EQ(ScopedTimerSlack::Current(), before);
}

TEST(PollUntilTest, AnInfiniteSlackLeavesTheThreadsOwn) {
  const absl::Duration before = ScopedTimerSlack::Current();
  PollOptions options;
  options.eager_polls = 0;
  options.slack = absl::InfiniteDuration();
  std::vector<absl::Duration> seen;
  ASSERT_TRUE(PollUntil(
                  [&]() -> absl::StatusOr<bool> {
                    seen.push_back(ScopedTimerSlack::Current());
                    return seen.size() == 3;
                  },
                  absl::Now() + absl::Seconds(30), options)
                  .ok());
  for (absl::Duration slack : seen) EXPECT_EQ(slack, before);
}

TEST(PollUntilTest, ReturnsFalseOnceTheDeadlinePasses) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(5);
  absl::StatusOr<bool> reached =
      PollUntil([]() -> absl::StatusOr<bool> { return false; }, deadline);
  ASSERT_TRUE(reached.ok()) << reached.status();
  EXPECT_FALSE(*reached);
  EXPECT_GE(absl::Now(), deadline);
}

TEST(PollUntilTest, ReturnsTheProbesErrorAndRestoresTheSlack) {
  const absl::Duration before = ScopedTimerSlack::Current();
  int polls = 0;
  PollOptions options;
  options.eager_polls = 1;
  absl::StatusOr<bool> reached = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        if (++polls == 5) return absl::DataLossError("the stream broke");
        return false;
      },
      absl::Now() + absl::Seconds(30), options);
  EXPECT_EQ(reached.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(ScopedTimerSlack::Current(), before);
}

}  // namespace
}  // namespace rdmaflow
