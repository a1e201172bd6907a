// WaitPolicy parsing and validation, and IdleBackoff's escalation from spin
// to yield to sleep, on an injected clock (no real time passes).
#include "onesided/progress/wait_policy.h"

#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WaitPolicyTest, NamedPoliciesRoundTripThroughText) {
  for (const char* text : {"spin", "yield", "adaptive:spin=200,yield_us=100,sleep_us=100",
                           "adaptive:spin=0,yield_us=0,sleep_us=1000",
                           "adaptive:spin=100,yield_us=0,sleep_us=1000,events=1",
                           "adaptive:spin=50,yield_us=0,sleep_us=20,announced=0"}) {
    absl::StatusOr<WaitPolicy> parsed = WaitPolicy::Parse(text);
    ASSERT_THAT(parsed, IsOk()) << text;
    EXPECT_EQ(parsed->ToString(), text);
  }
  absl::StatusOr<WaitPolicy> adaptive = WaitPolicy::Parse("adaptive");
  ASSERT_THAT(adaptive, IsOk());
  EXPECT_EQ(adaptive->ToString(), WaitPolicy::Adaptive().ToString());
  absl::StatusOr<WaitPolicy> fields = WaitPolicy::Parse("adaptive:sleep_us=2");
  ASSERT_THAT(fields, IsOk());
  EXPECT_EQ(fields->max_sleep, absl::Microseconds(2));
  EXPECT_LE(fields->min_sleep, fields->max_sleep);
}

TEST(WaitPolicyTest, BadTextIsNamed) {
  EXPECT_THAT(WaitPolicy::Parse("busy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spin, yield or adaptive")));
  EXPECT_THAT(WaitPolicy::Parse("spin:spin=3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only adaptive")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:nap=3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown field 'nap'")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:spin=-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("non-negative")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:spin=99999999999999999999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spin=")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:events=2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("events is 0 or 1")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:announced=2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("announced is 0 or 1")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:announce=0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("announced)")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:sleep_us=0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sleeps must lie")));
  EXPECT_THAT(WaitPolicy::Parse("adaptive:sleep_us=5000000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sleeps must lie")));
  WaitPolicy inverted;
  inverted.min_sleep = absl::Milliseconds(2);
  inverted.max_sleep = absl::Milliseconds(1);
  EXPECT_THAT(inverted.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_sleep")));
}

// A clock that only moves when told to, recording what the backoff did.
struct FakeClock {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> sleeps;
  int yields = 0;
  IdleBackoff::Clock Make() {
    return {[this] { return now; },
            [this](absl::Duration d) {
              sleeps.push_back(d);
              now += d;
            },
            [this] { ++yields; }};
  }
};

TEST(IdleBackoffTest, SpinsThenYieldsThenSleepsDoublingUpToTheBound) {
  WaitPolicy policy;
  policy.spin_rounds = 3;
  policy.yield_for = absl::Microseconds(10);
  policy.min_sleep = absl::Microseconds(5);
  policy.max_sleep = absl::Microseconds(20);
  FakeClock clock;
  IdleBackoff backoff(policy, clock.Make());
  for (int i = 0; i < 3; ++i) backoff.Idle();
  EXPECT_EQ(backoff.phase(), IdleBackoff::Phase::kSpin);
  EXPECT_EQ(clock.yields, 0);
  backoff.Idle();
  backoff.Idle();
  EXPECT_EQ(backoff.phase(), IdleBackoff::Phase::kYield);
  EXPECT_EQ(clock.yields, 2);
  clock.now += absl::Microseconds(10);  // the yield phase is over
  for (int i = 0; i < 4; ++i) backoff.Idle();
  EXPECT_EQ(backoff.phase(), IdleBackoff::Phase::kSleep);
  EXPECT_THAT(clock.sleeps,
              ElementsAre(absl::Microseconds(5), absl::Microseconds(10), absl::Microseconds(20),
                          absl::Microseconds(20)));
  EXPECT_EQ(backoff.yields(), 2);
  EXPECT_EQ(backoff.sleeps(), 4);

  // A wait with less time left sleeps only that long.
  backoff.Idle(absl::Microseconds(3));
  EXPECT_EQ(clock.sleeps.back(), absl::Microseconds(3));
  backoff.Idle(-absl::Microseconds(1));
  EXPECT_EQ(clock.sleeps.back(), absl::ZeroDuration());
  clock.sleeps.resize(4);

  // Progress starts over from spinning, and from the shortest sleep.
  backoff.Reset();
  EXPECT_EQ(backoff.phase(), IdleBackoff::Phase::kSpin);
  for (int i = 0; i < 3; ++i) backoff.Idle();
  EXPECT_EQ(clock.yields, 2);
  backoff.Idle();  // yields: the clock is at the start of a new yield phase
  EXPECT_EQ(clock.yields, 3);
  clock.now += absl::Microseconds(10);
  backoff.Idle();
  EXPECT_EQ(clock.sleeps.back(), absl::Microseconds(5));
}

TEST(IdleBackoffTest, SpinNeverYieldsAndYieldNeverSleeps) {
  FakeClock clock;
  IdleBackoff spin(WaitPolicy::Spin(), clock.Make());
  for (int i = 0; i < 100000; ++i) spin.Idle();
  EXPECT_EQ(clock.yields, 0);
  EXPECT_TRUE(clock.sleeps.empty());

  IdleBackoff yield(WaitPolicy::Yield(), clock.Make());
  for (int i = 0; i < 1000; ++i) {
    yield.Idle();
    clock.now += absl::Seconds(1);
  }
  EXPECT_GT(clock.yields, 0);
  EXPECT_TRUE(clock.sleeps.empty());
}

}  // namespace
}  // namespace rdmaflow::onesided
