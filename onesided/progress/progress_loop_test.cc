// ProgressLoop over a loopback pair: notifications reach the handler that
// claims them, round handlers run every round and may leave, waits end at
// their deadline or with the failure that stopped them, a dead peer is
// found by the liveness probe, and a call from a thread that does not own
// the loop aborts with a message.
#include "onesided/progress/progress_loop.h"

#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/waits.h"
#include "rdma/blocking.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/loopback_pair.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// Rank 0 and rank 1 on one loopback fabric, rank 1 connected to rank 0 and
// rank 0 to rank 1; rank 0's loop is the one under test.
class ProgressLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<rdma::testing::LoopbackPair> pair = rdma::testing::LoopbackPair::Create();
    ASSERT_THAT(pair, IsOk());
    transports_ = std::move(pair->transports);
    auto region = transports_[0]->Allocate(64);
    ASSERT_THAT(region, IsOk());
    region_ = std::make_unique<rdma::MemoryRegion>(*std::move(region));
    auto source = transports_[1]->Allocate(64);
    ASSERT_THAT(source, IsOk());
    source_ = std::make_unique<rdma::MemoryRegion>(*std::move(source));
    to_0_ = std::move(pair->to_0);
    to_1_ = std::move(pair->to_1);
    ProgressLoopOptions options;
    options.name = "rank 0";
    options.liveness_interval = absl::Milliseconds(1);
    loop_ = std::make_unique<ProgressLoop>(*transports_[0], options);
  }

  // Rank 1 writes `byte` into rank 0's region, with a notification.
  absl::Status WriteFrom1(std::byte byte, uint32_t notification) {
    std::memset(source_->data(), static_cast<int>(byte), 64);
    const rdma::RemoteRegion target = region_->descriptor();
    return rdma::Write(*transports_[1], *to_0_, {source_.get(), 0, 64}, {&target, 0, 64},
                       notification, absl::Now() + kTimeout);
  }

  std::vector<std::unique_ptr<rdma::loopback::LoopbackTransport>> transports_;
  std::unique_ptr<rdma::MemoryRegion> region_, source_;
  std::unique_ptr<rdma::Endpoint> to_0_, to_1_;
  std::unique_ptr<ProgressLoop> loop_;
};

TEST_F(ProgressLoopTest, NotificationsGoToTheFirstHandlerThatClaimsThem) {
  std::vector<uint32_t> declined, claimed;
  loop_->AddNotificationHandler([&](const rdma::Notification& n) {
    declined.push_back(n.value);
    return false;
  });
  loop_->AddNotificationHandler([&](const rdma::Notification& n) {
    EXPECT_EQ(n.peer_rank, 1);
    if (n.value == 99) return false;
    claimed.push_back(n.value);
    return true;
  });
  int after_claim = 0;
  loop_->AddNotificationHandler([&](const rdma::Notification&) { return ++after_claim > 0; });
  ASSERT_THAT(WriteFrom1(std::byte{1}, 7), IsOk());
  ASSERT_THAT(WriteFrom1(std::byte{2}, 99), IsOk());
  ASSERT_THAT(loop_->WaitUntil([&] { return declined.size() == 2; }, absl::Now() + kTimeout,
                               [] { return "two notifications"; }),
              IsOk());
  EXPECT_THAT(declined, ElementsAre(7, 99));
  EXPECT_THAT(claimed, ElementsAre(7));
  EXPECT_EQ(after_claim, 1);  // only 99 reached it
  EXPECT_EQ(loop_->unclaimed_notifications(), 0);
  EXPECT_EQ(region_->data()[0], std::byte{2});  // the data came before its notification
}

TEST_F(ProgressLoopTest, UnclaimedNotificationsAreCounted) {
  loop_->AddNotificationHandler([](const rdma::Notification&) { return false; });
  ASSERT_THAT(WriteFrom1(std::byte{1}, 5), IsOk());
  ASSERT_THAT(loop_->WaitUntil([&] { return loop_->unclaimed_notifications() == 1; },
                               absl::Now() + kTimeout, [] { return "a notification"; }),
              IsOk());
}

TEST_F(ProgressLoopTest, ALoopWithoutNotificationHandlersLeavesThemInTheTransport) {
  ASSERT_THAT(WriteFrom1(std::byte{1}, 9), IsOk());
  std::optional<rdma::Notification> left;
  ASSERT_THAT(loop_->WaitUntil(
                  [&] {
                    if (!left.has_value()) left = transports_[0]->PollNotification();
                    return left.has_value();
                  },
                  absl::Now() + kTimeout, [] { return "the notification"; }),
              IsOk());
  EXPECT_EQ(left->value, 9u);
  EXPECT_EQ(loop_->unclaimed_notifications(), 0);
}

TEST_F(ProgressLoopTest, RoundHandlersRunEachRoundAndMayRemoveThemselves) {
  int a = 0, b = 0;
  int64_t b_id = 0;
  loop_->AddRoundHandler([&] {
    ++a;
    return false;
  });
  b_id = loop_->AddRoundHandler([&] {
    if (++b == 3) loop_->RemoveHandler(b_id);
    return true;
  });
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<int> moved = loop_->Poll();
    ASSERT_THAT(moved, IsOk());
    EXPECT_EQ(*moved, i < 3 ? 1 : 0) << "round " << i;  // b's rounds moved something
  }
  EXPECT_EQ(a, 5);
  EXPECT_EQ(b, 3);
  EXPECT_EQ(loop_->rounds(), 5);
}

// Rank 0's transport, counting the waits a loop sleeps in.
class WaitCountingTransport final : public rdma::Transport {
 public:
  explicit WaitCountingTransport(rdma::Transport& inner, bool announces = false)
      : inner_(inner), announces_(announces) {}
  int rank() const override { return inner_.rank(); }
  rdma::Capabilities capabilities() const override { return inner_.capabilities(); }
  std::string address() const override { return inner_.address(); }
  absl::StatusOr<rdma::MemoryRegion> Allocate(size_t bytes) override {
    return inner_.Allocate(bytes);
  }
  absl::StatusOr<rdma::MemoryRegion> Register(absl::Span<std::byte> memory) override {
    return inner_.Register(memory);
  }
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(const rdma::PeerInfo& peer) override {
    return inner_.Connect(peer);
  }
  absl::StatusOr<int> Progress() override { return inner_.Progress(); }
  std::optional<rdma::Notification> PollNotification() override {
    return inner_.PollNotification();
  }
  bool WaitForActivity(absl::Duration timeout) override {
    ++waits;
    return inner_.WaitForActivity(timeout);
  }
  bool AnnouncesActivity() const override { return announces_; }
  int waits = 0;

 private:
  rdma::Transport& inner_;
  const bool announces_;
};

TEST_F(ProgressLoopTest, AnEventsPolicySleepsInTheTransportsWait) {
  for (const char* text : {"adaptive:spin=0,sleep_us=50,events=1", "adaptive:spin=0,sleep_us=50"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<WaitPolicy> policy = WaitPolicy::Parse(text);
    ASSERT_THAT(policy, IsOk());
    WaitCountingTransport counting(*transports_[0]);
    ProgressLoop loop(counting, ProgressLoopOptions{});
    int rounds = 0;
    ASSERT_THAT(loop.WaitUntil([&] { return ++rounds > 5; }, absl::Now() + kTimeout,
                               [] { return "five rounds"; }, {}, *policy),
                IsOk());
    if (policy->sleep_on_events) {
      EXPECT_GE(counting.waits, 4) << "each idle round after the first sleeps in the transport";
    } else {
      EXPECT_EQ(counting.waits, 0) << "a plain sleep does not involve the transport";
    }
  }
}

// Where the transport announces everything, a policy that sleeps sleeps in
// its wait from the first idle round (no spinning); one that never sleeps
// is left as it is, and so is one that asks to be kept (announced=0).
TEST_F(ProgressLoopTest, ATransportThatAnnouncesActivityIsWaitedOnAtOnce) {
  struct Case {
    WaitPolicy policy;
    bool announces;
    int waits;  // of the 6 idle rounds, those that slept in the transport
  };
  WaitPolicy as_given = WaitPolicy::Adaptive();  // announced=0: spins first
  as_given.follow_announced = false;
  for (const Case& c : {Case{WaitPolicy::Adaptive(), true, 6}, Case{WaitPolicy::Adaptive(), false, 0},
                        Case{WaitPolicy::Spin(), true, 0}, Case{WaitPolicy::Yield(), true, 0},
                        Case{as_given, true, 0}}) {
    SCOPED_TRACE(absl::StrCat(c.policy.ToString(), c.announces ? ", announced" : ""));
    WaitCountingTransport counting(*transports_[0], c.announces);
    ProgressLoop loop(counting, ProgressLoopOptions{});
    int rounds = 0;
    ASSERT_THAT(loop.WaitUntil([&] { return ++rounds > 6; }, absl::Now() + kTimeout,
                               [] { return "six rounds"; }, {}, c.policy),
                IsOk());
    EXPECT_EQ(counting.waits, c.waits);
  }
}

TEST(WaitPolicyForAnnouncedActivityTest, SleepsAtOnceForLonger) {
  const WaitPolicy announced = WaitPolicy::Adaptive().ForAnnouncedActivity();
  EXPECT_EQ(announced.spin_rounds, 0);
  EXPECT_EQ(announced.yield_for, absl::ZeroDuration());
  EXPECT_EQ(announced.max_sleep, WaitPolicy::kAnnouncedMaxSleep);
  EXPECT_EQ(announced.min_sleep, WaitPolicy::Adaptive().min_sleep);
  EXPECT_TRUE(announced.sleep_on_events);
  EXPECT_OK(announced.Validate());
  WaitPolicy longer = WaitPolicy::Adaptive();
  longer.max_sleep = absl::Milliseconds(2);
  EXPECT_EQ(longer.ForAnnouncedActivity().max_sleep, absl::Milliseconds(2));
  EXPECT_EQ(WaitPolicy::Spin().ForAnnouncedActivity().ToString(), "spin");
  EXPECT_EQ(WaitPolicy::Yield().ForAnnouncedActivity().ToString(), "yield");
  absl::StatusOr<WaitPolicy> as_given = WaitPolicy::Parse("adaptive:spin=300,announced=0");
  ASSERT_THAT(as_given, IsOk());
  EXPECT_EQ(as_given->ForAnnouncedActivity().ToString(), as_given->ToString())
      << "announced=0 keeps the policy as given";
}

TEST_F(ProgressLoopTest, WaitSeesWhatAPeerWroteAndEndsAtItsDeadline) {
  ASSERT_THAT(WriteFrom1(std::byte{0x5A}, 1), IsOk());
  EXPECT_THAT(loop_->WaitUntil([&] { return region_->data()[63] == std::byte{0x5A}; },
                               absl::Now() + kTimeout, [] { return "the write"; }),
              IsOk());
  const absl::Time start = absl::Now();
  EXPECT_THAT(loop_->WaitUntil([] { return false; }, start + absl::Milliseconds(30),
                               [] { return "Godot"; }, {}, WaitPolicy::Adaptive()),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 timed out after"), HasSubstr("waiting for Godot"))));
  EXPECT_GE(absl::Now(), start + absl::Milliseconds(30));
}

TEST_F(ProgressLoopTest, WaitForProgressTimesOutOnlyAfterNoProgressForTheStall) {
  // The protocol's turn moves for well over the stall in all, then stops:
  // the wait goes on while it moves (the stall runs from the last move, not
  // from the start) and fails once nothing moved for the stall.
  constexpr absl::Duration kStall = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  const absl::Time moving_until = start + 3 * kStall;
  int turns = 0;
  absl::Time last_move = start;
  EXPECT_THAT(loop_->WaitForProgress(
                  [&](bool& moved) -> absl::Status {
                    ++turns;
                    RETURN_IF_ERROR(loop_->Poll().status());
                    const absl::Time now = absl::Now();
                    moved = now < moving_until;
                    if (moved) last_move = now;
                    return absl::OkStatus();
                  },
                  [] { return false; }, kStall, [] { return "message 3 of 8 from rank 1"; },
                  {1}),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 timed out: no progress for 500ms"),
                             HasSubstr("waiting for message 3 of 8 from rank 1"))));
  EXPECT_GE(last_move, start + 2 * kStall);  // it moved past a whole stall
  EXPECT_GE(absl::Now(), last_move + kStall);
  EXPECT_GT(turns, 1);
}

TEST_F(ProgressLoopTest, WaitForProgressEndsWhenDoneReturnsATurnsErrorAndIdlesByItsHook) {
  // Done after a few idle rounds, each idled by the hook with what is left
  // of the stall.
  int turns = 0;
  std::vector<absl::Duration> limits;
  EXPECT_THAT(loop_->WaitForProgress(
                  [&](bool&) -> absl::Status {
                    ++turns;
                    return absl::OkStatus();
                  },
                  [&] { return turns == 3; }, kTimeout, [] { return "nothing"; }, {},
                  [&](absl::Duration limit) { limits.push_back(limit); }),
              IsOk());
  ASSERT_EQ(limits.size(), 2u);
  for (absl::Duration limit : limits) {
    EXPECT_GT(limit, absl::ZeroDuration());
    EXPECT_LE(limit, kTimeout);
  }
  // A turn's error ends the wait as it is.
  EXPECT_THAT(loop_->WaitForProgress(
                  [](bool&) { return absl::DataLossError("a forged descriptor"); },
                  [] { return false; }, kTimeout, [] { return "nothing"; }, {}),
              StatusIs(absl::StatusCode::kDataLoss, "a forged descriptor"));
}

TEST_F(ProgressLoopTest, AFailureEndsEveryWaitAndSaysWhatItWaitedFor) {
  loop_->Fail(absl::DataLossError("rank 1 forged a header"));
  loop_->Fail(absl::InternalError("a later failure is not the first"));
  EXPECT_THAT(loop_->WaitUntil([] { return false; }, absl::InfiniteFuture(),
                               [] { return "tensor 'w'"; }),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank 1 forged a header"),
                             HasSubstr("(rank 0 was waiting for tensor 'w')"))));
  EXPECT_THAT(loop_->Poll(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(ProgressLoopTest, BlockingHelpersWaitThroughTheLoopSoItsHandlersKeepRunning) {
  std::vector<uint32_t> seen;
  loop_->AddNotificationHandler([&](const rdma::Notification& n) {
    seen.push_back(n.value);
    return true;
  });
  int rounds = 0;
  loop_->AddRoundHandler([&] {
    ++rounds;
    return false;
  });
  ASSERT_THAT(WriteFrom1(std::byte{1}, 3), IsOk());  // waiting at rank 0
  // Rank 0 writes to rank 1 with a blocking helper driven by its loop.
  const rdma::RemoteRegion target = source_->descriptor();
  ASSERT_THAT(Write(*loop_, *to_1_, {region_.get(), 0, 64}, {&target, 0, 64},
                          std::nullopt, absl::Now() + kTimeout),
              IsOk());
  ASSERT_THAT(Flush(*loop_, *to_1_, absl::Now() + kTimeout), IsOk());
  EXPECT_THAT(seen, ElementsAre(3));  // dispatched while the helper waited
  EXPECT_GT(rounds, 0);
  EXPECT_EQ(loop_->rounds(), rounds);
}

TEST_F(ProgressLoopTest, DrainCollectsCompletionsEvenAfterAFailure) {
  loop_->Fail(absl::DataLossError("rank 1 forged a credit"));
  auto done = std::make_shared<bool>(false);
  ASSERT_THAT(to_1_->PostFlush([done](absl::Status) { *done = true; }), IsOk());
  // A wait would stop at the failure; the drain goes on to the completion.
  EXPECT_FALSE(*done);
  EXPECT_THAT(loop_->Drain([&] { return *done; }, absl::Now() + kTimeout), IsOk());
  EXPECT_TRUE(*done);
  // A drain whose operation never completes ends at its deadline.
  const absl::Time start = absl::Now();
  EXPECT_THAT(loop_->Drain([] { return false; }, start + absl::Milliseconds(20)), IsOk());
  EXPECT_GE(absl::Now(), start + absl::Milliseconds(20));
}

TEST_F(ProgressLoopTest, ADeadPeerIsFoundByTheProbeAndReportedToItsWatcher) {
  std::vector<int> failed;
  absl::Status why;
  int64_t watch = 0;
  watch = loop_->WatchPeer(1, to_1_.get(), [&](int peer, const absl::Status& status) {
    failed.push_back(peer);
    why = status;
    loop_->Unwatch(watch);  // a watcher may stop watching in the callback
  });
  // A second protocol watching the same peer hears of its death too.
  int second = 0;
  loop_->WatchPeer(1, to_1_.get(), [&](int, const absl::Status&) { ++second; });
  to_0_.reset();
  transports_[1].reset();  // rank 1 dies
  ASSERT_THAT(loop_->WaitUntil([&] { return !failed.empty(); }, absl::Now() + kTimeout,
                               [] { return "rank 1's death"; }, {1}),
              IsOk());
  ASSERT_THAT(loop_->WaitUntil([&] { return second > 0; }, absl::Now() + kTimeout,
                               [] { return "the second watcher"; }, {1}),
              IsOk());
  EXPECT_THAT(failed, ElementsAre(1));
  EXPECT_EQ(second, 1);
  EXPECT_FALSE(why.ok());
  EXPECT_FALSE(absl::IsCancelled(why));
  EXPECT_GE(loop_->probes_posted(), 1);
}

TEST_F(ProgressLoopTest, ADeadPeerWithoutAWatcherCallbackFailsTheLoop) {
  loop_->WatchPeer(1, to_1_.get(), nullptr);
  to_0_.reset();
  transports_[1].reset();
  EXPECT_THAT(loop_->WaitUntil([] { return false; }, absl::Now() + kTimeout,
                               [] { return "a message from rank 1"; }, {1}),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("(rank 0 was waiting for a message from rank 1)")));
}

TEST_F(ProgressLoopTest, ARearmedWatchIsNotProbed) {
  ProgressLoopOptions options;
  options.liveness_interval = absl::Hours(1);
  ProgressLoop loop(*transports_[0], options);
  const int64_t watch = loop.WatchPeer(1, to_1_.get(), nullptr);
  loop.Rearm(watch);
  for (int i = 0; i < 100; ++i) {
    ASSERT_THAT(loop.Poll(), IsOk());
    loop.ProbeIfDue();
  }
  EXPECT_EQ(loop.probes_posted(), 0);
}

TEST_F(ProgressLoopTest, RearmingOneWatchLeavesTheOtherWatchOfItsPeerDue) {
  // Two protocols watch rank 1; the first re-arms its watch every round (an
  // idle link, as the Messenger does), which must not silence the second's.
  const int64_t idle = loop_->WatchPeer(1, to_1_.get(), nullptr);
  loop_->WatchPeer(1, to_1_.get(), nullptr);
  loop_->AddRoundHandler([&] {
    loop_->Rearm(idle);
    return false;
  });
  EXPECT_THAT(loop_->WaitUntil([&] { return loop_->probes_posted() > 0; },
                               absl::Now() + kTimeout, [] { return "a probe"; }, {1}),
              IsOk());
}

using ProgressLoopDeathTest = ProgressLoopTest;

TEST_F(ProgressLoopDeathTest, ACallFromAnotherThreadAbortsNamingTheLoop) {
  EXPECT_DEATH(
      {
        std::thread other([&] { loop_->Poll().IgnoreError(); });
        other.join();
      },
      "ProgressLoop 'rank 0': Poll called on thread .* belongs to thread");
}

TEST_F(ProgressLoopTest, AnAdoptedLoopRunsOnItsNewThread) {
  int rounds = 0;
  loop_->AddRoundHandler([&] { return ++rounds < 0; });
  std::thread other([&] {
    loop_->AdoptOnCurrentThread();
    EXPECT_TRUE(loop_->OnLoopThread());
    EXPECT_THAT(loop_->Poll(), IsOk());
  });
  other.join();
  EXPECT_FALSE(loop_->OnLoopThread());
  EXPECT_EQ(rounds, 1);
  loop_->AdoptOnCurrentThread();  // back, for the destructor's peers
}

}  // namespace
}  // namespace rdmaflow::onesided
