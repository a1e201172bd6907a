// CommunicationThread on one rank over loopback: the work runs on another
// thread that holds the loop, the loop goes on being progressed after the
// work until Stop(), Stop() returns the work's status and gives the loop
// back, an exception becomes kInternal, and a second Start() is refused.
#include "strategies/communication_thread.h"

#include <atomic>
#include <stdexcept>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/testing/rank_threads.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(30);

// Runs `body` with a one-rank loopback transport's loop.
void WithLoop(const std::function<void(onesided::ProgressLoop& loop)>& body) {
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store&) {
        onesided::ProgressLoop loop(transport, {});
        body(loop);
        return absl::OkStatus();
      });
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
}

// Spins until `ready()` or the deadline; false at the deadline.
bool SpinUntil(const std::function<bool()>& ready) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (!ready()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(CommunicationThreadTest, TheWorkHoldsTheLoopAndTheLoopIsServedUntilStop) {
  WithLoop([](onesided::ProgressLoop& loop) {
    std::atomic<int> rounds{0};
    std::atomic<bool> worked{false};
    const int64_t handler = loop.AddRoundHandler([&rounds] {
      rounds.fetch_add(1, std::memory_order_relaxed);
      return false;
    });
    CommunicationThread thread(loop, "the test's work");
    ASSERT_TRUE(thread.Start([&] {
                  worked.store(loop.OnLoopThread(), std::memory_order_release);
                  return absl::OkStatus();
                }).ok());
    EXPECT_TRUE(thread.running());
    // The work polls nothing: every round is the thread's serving after
    // it (this thread never polls the loop here).
    EXPECT_TRUE(SpinUntil([&] { return rounds.load(std::memory_order_relaxed) > 10; }))
        << "the loop was not progressed after the work";
    EXPECT_FALSE(loop.OnLoopThread());
    EXPECT_TRUE(thread.Stop().ok());
    EXPECT_FALSE(thread.running());
    EXPECT_TRUE(worked.load(std::memory_order_acquire)) << "the work did not hold the loop";
    EXPECT_TRUE(loop.OnLoopThread());
    EXPECT_LE(thread.work_begin(), thread.work_end());
    // Stopped, nothing polls the loop any more.
    const int after = rounds.load(std::memory_order_relaxed);
    loop.RemoveHandler(handler);
    EXPECT_EQ(rounds.load(std::memory_order_relaxed), after);
    EXPECT_TRUE(thread.Stop().ok()) << "a second Stop() has nothing to do";
  });
}

TEST(CommunicationThreadTest, StopReturnsTheWorksFailureAndTheThreadCanStartAgain) {
  WithLoop([](onesided::ProgressLoop& loop) {
    CommunicationThread thread(loop, "the test's work");
    ASSERT_TRUE(thread.Start([] { return absl::DataLossError("torn"); }).ok());
    EXPECT_THAT(thread.Stop(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("torn")));
    EXPECT_TRUE(loop.OnLoopThread());
    ASSERT_TRUE(thread.Start([] { return absl::OkStatus(); }).ok());
    EXPECT_TRUE(thread.Stop().ok()) << "the last failure must not stick";
  });
}

TEST(CommunicationThreadTest, AnExceptionBecomesAnInternalErrorNamingTheWork) {
  WithLoop([](onesided::ProgressLoop& loop) {
    CommunicationThread thread(loop, "the test's work");
    ASSERT_TRUE(thread.Start([]() -> absl::Status { throw std::runtime_error("boom"); }).ok());
    EXPECT_THAT(thread.Stop(), StatusIs(absl::StatusCode::kInternal,
                                        ::testing::AllOf(HasSubstr("the test's work"), HasSubstr("boom"))));
    EXPECT_TRUE(loop.OnLoopThread());
  });
}

TEST(CommunicationThreadTest, ASecondStartWhileOneRunsIsRefused) {
  WithLoop([](onesided::ProgressLoop& loop) {
    CommunicationThread thread(loop, "the test's work");
    ASSERT_TRUE(thread.Start([] { return absl::OkStatus(); }).ok());
    EXPECT_THAT(thread.Start([] { return absl::OkStatus(); }),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Stop() it first")));
    EXPECT_TRUE(thread.Stop().ok());
  });
}

TEST(CommunicationThreadTest, TheDestructorStopsARunningThread) {
  WithLoop([](onesided::ProgressLoop& loop) {
    {
      CommunicationThread thread(loop, "the test's work");
      ASSERT_TRUE(thread.Start([] { return absl::OkStatus(); }).ok());
    }
    EXPECT_TRUE(loop.OnLoopThread());
  });
}

// A transport that announces its activity (as UCX over TCP alone does): the
// serving thread sleeps in its wait, and Stop() interrupts it, once. (The
// fake ends the wait that follows the interrupt; that a sleep in progress
// ends is the UCX test's, OverTcpAloneAnotherThreadEndsTheWait.)
class AnnouncingTransport : public rdma::testing::TransportWrapper {
 public:
  using TransportWrapper::TransportWrapper;
  bool AnnouncesActivity() const override { return true; }
  bool WaitForActivity(absl::Duration timeout) override {
    waits.fetch_add(1);
    if (interrupted.exchange(false)) return true;
    return TransportWrapper::WaitForActivity(timeout);
  }
  void InterruptWait() override {
    interrupts.fetch_add(1);
    interrupted.store(true);
  }
  std::atomic<int> waits{0}, interrupts{0};
  std::atomic<bool> interrupted{false};
};

TEST(CommunicationThreadTest, StopWakesAThreadSleepingInTheTransportsWait) {
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store&) {
        AnnouncingTransport announcing(transport);
        onesided::ProgressLoop loop(announcing, {});
        CommunicationThread thread(loop, "the test's work");
        EXPECT_TRUE(thread.Start([] { return absl::OkStatus(); }).ok());
        // Serving: the thread's idle rounds sleep in the transport's wait.
        EXPECT_TRUE(SpinUntil([&] { return announcing.waits.load() >= 3; }));
        EXPECT_EQ(announcing.interrupts.load(), 0);
        EXPECT_TRUE(thread.Stop().ok());
        EXPECT_EQ(announcing.interrupts.load(), 1) << "Stop() did not interrupt the wait";
        return absl::OkStatus();
      });
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
}

}  // namespace
}  // namespace rdmaflow::strategies
