// Gossip with one peer slower than the timeout (the slow-peer suite): three
// ranks on a ring as threads; rank 0's operations towards rank 1 are held
// by a SlowPeerTransport past the 1 s timeout. Rank 0 must skip rank 1 (as
// documented: a peer whose read or write times out is gone), name it and
// the operation, finish every step and Finish() within the timeout, and
// never mix bytes that land late: rank 1's parameters are 1e6 where ranks
// 0 and 2 hold 0 and 10, so one late landing in a buffer in use shows.
#include <memory>
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "ATen/ops/full.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/gossip/gossip_strategy.h"
#include "strategies/testing/slow_peer_transport.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::gossip {
namespace {

using ::rdmaflow::strategies::testing::SlowPeerTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kRanks = 3, kSteps = 4, kElements = 1024;
constexpr absl::Duration kTimeout = absl::Seconds(1);

struct SlowRun {
  std::vector<absl::Status> status;
  std::vector<at::Tensor> final;
  std::vector<int> mixed0, lost0;        // rank 0's
  std::vector<absl::Status> errors0;     // why rank 0 lost its peers
  int64_t outstanding_to_1 = -1;         // rank 0's, after its first step
  int64_t landed_after_close = -1;       // rank 0's held operations
  absl::Duration finish0;
};

// Rank 0 holds `hold` (towards rank 1); everyone runs kSteps exchanges of
// pure mixing, kept within a step of each other by a store barrier.
SlowRun RunWithHold(const std::string& mode, SlowPeerTransport::Hold hold) {
  at::set_num_threads(1);
  SlowRun run;
  run.final.resize(kRanks);
  run.status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        SlowPeerTransport slow(transport);
        if (rank == 0) slow.AddHold(hold);
        StrategyOptions options =
            testing::ToyOptions(kSteps, {{"topology", "ring"}, {"mode", mode}});
        options.communicator_options.timeout = kTimeout;
        ASSIGN_OR_RETURN(auto strategy, GossipStrategy::Create(options));
        const float value = rank == 0 ? 0.0f : rank == 1 ? 1e6f : 10.0f;
        std::vector<Parameter> params = {{"a", at::full({kElements}, value)}};
        RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &slow, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        int step = 0;
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          RETURN_IF_ERROR(rdma::Barrier(store, "test", absl::StrCat("step", step++), kRanks,
                                        absl::Seconds(60)));
          return ComputeResult{};
        };
        while (!strategy->done()) {
          RETURN_IF_ERROR(strategy->Step(nothing).status());
          if (rank == 0 && step == 1) run.outstanding_to_1 = slow.outstanding(1);
        }
        const absl::Time begin = absl::Now();
        RETURN_IF_ERROR(strategy->Finish());
        if (rank == 0) {
          run.finish0 = absl::Now() - begin;
          run.mixed0 = strategy->peers_mixed();
          run.lost0 = strategy->peers_lost();
          run.errors0 = strategy->peer_errors();
          run.landed_after_close = slow.landed_after_close();
        }
        run.final[rank] = params[0].tensor.detach().clone();
        return absl::OkStatus();
      });
  return run;
}

// Rank 0 skipped rank 1 for good after naming it, mixed only with rank 2,
// and nothing of rank 1's (1e6) reached its parameters.
void ExpectRank1SkippedCleanly(const SlowRun& run, const std::string& operation) {
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  EXPECT_EQ(run.lost0, std::vector<int>{1});
  ASSERT_EQ(run.errors0.size(), 1u);
  EXPECT_THAT(run.errors0[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                       AllOf(HasSubstr(operation), HasSubstr("rank 1"))));
  EXPECT_EQ(run.mixed0, std::vector<int>(kSteps - 1, 2));
  for (int r : {0, 2}) {
    EXPECT_LE(run.final[r].max().item<float>(), 10.0f) << "rank " << r << " mixed late bytes";
    EXPECT_GE(run.final[r].min().item<float>(), 0.0f) << "rank " << r;
  }
  EXPECT_LT(run.finish0, kTimeout + absl::Seconds(5));  // Finish waits at most the timeout
}

// Rank 0's second read from rank 1 (its parameters, after the header) is
// held; it is let go just before rank 0's third read from rank 2 (the
// stamp re-read after rank 2's parameters landed in the scratch buffer), so
// a read that was not fenced lands in the buffer about to be mixed.
SlowPeerTransport::Hold HeldParameterRead(bool survives_close) {
  SlowPeerTransport::Hold hold;
  hold.op = SlowPeerTransport::Op::kRead;
  hold.peer = 1;
  hold.nth = 2;
  hold.release_before = [](SlowPeerTransport::Op op, int peer, int64_t nth) {
    return op == SlowPeerTransport::Op::kRead && peer == 2 && nth == 3;
  };
  hold.survives_close = survives_close;
  return hold;
}

TEST(GossipSlowPeerTest, TimedOutReadIsCancelledAndItsPeerSkipped) {
  SlowRun run = RunWithHold("pull", HeldParameterRead(/*survives_close=*/false));
  ExpectRank1SkippedCleanly(run, "read");
  EXPECT_EQ(run.outstanding_to_1, 0) << "rank 0 went on with its read from rank 1 in flight";
  EXPECT_EQ(run.landed_after_close, 0);
}

TEST(GossipSlowPeerTest, ReadThatOutlivesItsCancellationLandsInARetiredBuffer) {
  // The backend cannot cancel the read in time: it lands after rank 0 went
  // on. It must land in a scratch buffer that is no longer mixed.
  SlowRun run = RunWithHold("pull", HeldParameterRead(/*survives_close=*/true));
  ExpectRank1SkippedCleanly(run, "read");
  EXPECT_EQ(run.outstanding_to_1, 1);    // rank 0 went on without it,
  EXPECT_EQ(run.landed_after_close, 1);  // and it did land late
  ASSERT_EQ(run.errors0.size(), 1u);
  EXPECT_THAT(run.errors0[0].message(), HasSubstr("did not end"));
}

TEST(GossipSlowPeerTest, TimedOutWriteInPushModeSkipsThePeer) {
  // Rank 0's first write to rank 1's mailbox (the stamp that opens its
  // message) is held past the timeout.
  SlowPeerTransport::Hold hold;
  hold.op = SlowPeerTransport::Op::kWrite;
  hold.peer = 1;
  SlowRun run = RunWithHold("push", hold);
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  EXPECT_EQ(run.lost0, std::vector<int>{1});
  ASSERT_EQ(run.errors0.size(), 1u);
  EXPECT_THAT(run.errors0[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                       AllOf(HasSubstr("write to rank 1"))));
  EXPECT_EQ(run.outstanding_to_1, 0);
  EXPECT_EQ(run.landed_after_close, 0);
  EXPECT_LT(run.finish0, kTimeout + absl::Seconds(5));
}

// A ring of kRanks in `mode` whose ranks hold their rank's value, its
// kSteps exchanges of pure mixing taken (not finished).
absl::StatusOr<std::unique_ptr<GossipStrategy>> RunAllSteps(int rank, rdma::Transport& transport,
                                                            rdma::Store& store,
                                                            const std::string& mode,
                                                            absl::Duration timeout) {
  StrategyOptions options = testing::ToyOptions(kSteps, {{"topology", "ring"}, {"mode", mode}});
  options.communicator_options.timeout = timeout;
  ASSIGN_OR_RETURN(auto strategy, GossipStrategy::Create(options));
  std::vector<Parameter> params = {{"a", at::full({kElements}, 1.0f * rank)}};
  RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &transport, &store}, params).status());
  RETURN_IF_ERROR(strategy->Start());
  ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> { return ComputeResult{}; };
  while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(nothing).status());
  return strategy;
}

TEST(GossipSlowPeerTest, APeerThatFinishesAndLeavesWhileProbedIsNotLost) {
  // Rank 0's probe of rank 2 in Finish() is held (never answered: over
  // TCP, a peer that stopped progressing); rank 2 starts finishing only
  // once that probe is out, so it finishes and leaves (its transport
  // destroyed) while the probe is pending. Rank 2 finished cleanly: rank 0
  // must not record it as lost, nor wait out the probe (in a job, its
  // other peers may give up on it meanwhile: seen with 4 ranks over TCP).
  constexpr absl::Duration kLongTimeout = absl::Seconds(30);
  std::vector<int> lost0;
  absl::Duration finish0;
  const std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        bool told = false;  // outlives `slow`, whose hook reads it
        SlowPeerTransport slow(transport);
        ASSIGN_OR_RETURN(auto strategy,
                         RunAllSteps(rank, slow, store, "push", kLongTimeout));
        if (rank == 0) {
          SlowPeerTransport::Hold probe;
          probe.op = SlowPeerTransport::Op::kFlush;
          probe.peer = 2;
          slow.AddHold(probe);
          slow.SetBeforeProgress([&] {
            if (!told && slow.held() > 0) {
              told = store.Set("test/probe_held", "1").ok();
            }
          });
        }
        if (rank == 2) {
          RETURN_IF_ERROR(store.Get("test/probe_held", absl::Seconds(60)).status());
        }
        const absl::Time begin = absl::Now();
        RETURN_IF_ERROR(strategy->Finish());
        if (rank == 0) {
          finish0 = absl::Now() - begin;
          lost0 = strategy->peers_lost();
        }
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  EXPECT_TRUE(lost0.empty()) << "rank 0 lost rank " << lost0[0];
  // The probe was never answered: a Finish() that waited for it took the
  // whole timeout.
  EXPECT_LT(finish0, kLongTimeout / 2);
}

// A live peer that never finishes (rank 2 calls Finish() only after rank
// 0's has returned) answers rank 0's probes: rank 0 must report it, not
// record it as lost, once its timeout has passed. Rank 0's tenth probe of
// rank 2 (about 0.9 s into its Finish(), so it runs out near 3.9 s) is
// held until 0.4 s past the finish's deadline (3 s), then answered: a
// probe still out at the deadline is waited for up to its own timeout, not
// taken for a lost peer. In both modes: push probes the peer's mailbox,
// pull its published buffer.
void ExpectLivePeerThatNeverFinishesIsReported(const std::string& mode) {
  constexpr absl::Duration kFinishTimeout = absl::Seconds(3);
  absl::Status finish0;
  std::vector<int> lost0;
  bool released = false;
  const std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        absl::Time begin = absl::InfiniteFuture();  // outlives `slow`, whose hook reads it
        // Rank 2 finishes once rank 0 has returned, however it returns.
        absl::Cleanup tell_rank2 = [&] {
          if (rank == 0) store.Set("test/rank0_finished", "1").IgnoreError();
        };
        SlowPeerTransport slow(transport);
        // Only rank 0 gives up; the others wait for rank 2 as long as it takes.
        ASSIGN_OR_RETURN(auto strategy,
                         RunAllSteps(rank, slow, store, mode,
                                     rank == 0 ? kFinishTimeout : absl::Seconds(60)));
        if (rank == 0) {
          SlowPeerTransport::Hold probe;
          probe.op = SlowPeerTransport::Op::kFlush;
          probe.peer = 2;
          probe.nth = 10;
          slow.AddHold(probe);
          slow.SetBeforeProgress([&] {
            if (!released && slow.held() > 0 &&
                absl::Now() > begin + kFinishTimeout + absl::Milliseconds(400)) {
              slow.ReleaseAll();
              released = true;
            }
          });
        }
        if (rank == 2) {
          RETURN_IF_ERROR(store.Get("test/rank0_finished", absl::Seconds(60)).status());
        }
        begin = absl::Now();
        absl::Status finished = strategy->Finish();
        if (rank == 0) {
          finish0 = finished;
          lost0 = strategy->peers_lost();
          return absl::OkStatus();
        }
        return finished;
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  EXPECT_TRUE(released) << "rank 0's tenth probe of rank 2 was not held over the deadline";
  EXPECT_THAT(finish0, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                AllOf(HasSubstr("ranks 2"), HasSubstr("did not finish"))));
  EXPECT_TRUE(lost0.empty()) << "rank 0 recorded live rank " << lost0[0] << " as lost";
}

TEST(GossipSlowPeerTest, ALivePeerThatNeverFinishesIsReportedInPushMode) {
  ExpectLivePeerThatNeverFinishesIsReported("push");
}

TEST(GossipSlowPeerTest, ALivePeerThatNeverFinishesIsReportedInPullMode) {
  ExpectLivePeerThatNeverFinishesIsReported("pull");
}

}  // namespace
}  // namespace rdmaflow::strategies::gossip
