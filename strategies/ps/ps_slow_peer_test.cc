// The parameter server with one peer slower than the timeout (the slow-peer
// suite), ranks as threads over loopback, 1 s timeout, no sleeps (the slow
// rank resumes when store keys say the others gave up):
//   - a worker that stalls (bsp): the server waiting for its gradient and
//     the other worker waiting for permission get kDeadlineExceeded naming
//     it (worker 1, rank 2);
//   - a server that does not answer a pull (its parameter READ held past
//     the timeout): the worker gets kDeadlineExceeded naming the server and
//     the read, which was cancelled (nothing lands in the parameters).
// Then, as documented, every rank is unusable (Step() refused, quoting the
// failure), Finish() returns that failure within its bound (the
// communicator's drain and barrier, each at most the timeout), and nothing
// a rank posted is still in flight.
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "ATen/ops/equal.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/ps/ps_strategy.h"
#include "strategies/testing/slow_peer_transport.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::ps {
namespace {

using ::rdmaflow::strategies::testing::SlowPeerTransport;
using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kSteps = 4, kBatch = 4;
constexpr absl::Duration kTimeout = absl::Seconds(1);
// Finish() after a failure: the communicator drains, then waits at its
// shutdown barrier, each for at most the timeout.
const absl::Duration kFinishBound = 2 * kTimeout + absl::Seconds(5);

struct Outcome {
  absl::Status step_error;  // the first failed Step()
  int64_t failed_clock = -1;
  absl::Status retry;       // a Step() after it
  absl::Status finished;
  absl::Duration finish_time;
  int64_t in_flight = -1;   // operations posted, completion not fired, after Finish()
  int64_t held = 0, landed_after_close = 0;
  std::vector<at::Tensor> params_after_error, params_later;
};

// 1 server + `workers` workers; `setup(rank, slow)` may add holds;
// `stall(rank, clock, store)` runs before each computation.
std::vector<Outcome> RunJob(
    int workers, const std::function<void(int, SlowPeerTransport&)>& setup,
    const std::function<absl::Status(int, int64_t, rdma::Store&)>& stall) {
  at::set_num_threads(1);
  const int world = 1 + workers;
  const ToyProblem problem(workers, kSteps, kBatch);
  std::vector<Outcome> outcome(world);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        SlowPeerTransport slow(transport);
        setup(rank, slow);
        Outcome& out = outcome[rank];
        StrategyOptions options = testing::ToyOptions(kSteps, {{"sync", "bsp"}});
        options.communicator_options.timeout = kTimeout;
        ASSIGN_OR_RETURN(auto strategy, PsStrategy::Create(options));
        std::vector<Parameter> params = problem.MakeParameters();
        RETURN_IF_ERROR(strategy->Prepare({rank, world, &slow, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        const int w = rank - 1;
        int64_t clock = 0;
        const ComputeFn train = w >= 0 ? problem.Compute(params, w) : ComputeFn();
        ComputeFn compute = [&]() -> absl::StatusOr<ComputeResult> {
          RETURN_IF_ERROR(stall(rank, clock, store));
          ++clock;
          return train();
        };
        auto snapshot = [&] {
          std::vector<at::Tensor> copy;
          for (const Parameter& p : params) copy.push_back(p.tensor.detach().clone());
          return copy;
        };
        while (!strategy->done()) {
          absl::StatusOr<StepReport> report =
              strategy->Step(strategy->computes() ? compute : nullptr);
          if (!report.ok()) {
            out.step_error = report.status();
            out.failed_clock = clock;
            break;
          }
        }
        if (!out.step_error.ok()) out.params_after_error = snapshot();
        RETURN_IF_ERROR(store.Set(absl::StrCat("test/gave_up/", rank), "1"));
        out.retry = strategy->Step(strategy->computes() ? compute : nullptr).status();
        const absl::Time begin = absl::Now();
        out.finished = strategy->Finish();
        out.finish_time = absl::Now() - begin;
        out.params_later = snapshot();
        out.in_flight = 0;
        for (int peer = 0; peer < world; ++peer) out.in_flight += slow.outstanding(peer);
        out.held = slow.held();
        out.landed_after_close = slow.landed_after_close();
        return absl::OkStatus();
      });
  for (int r = 0; r < world; ++r) EXPECT_OK(status[r]) << "rank " << r;
  return outcome;
}

// Unusable after its failure, finished within the bound with that failure,
// nothing in flight.
void ExpectUnusableAndFinished(const Outcome& out) {
  ASSERT_FALSE(out.step_error.ok());
  EXPECT_THAT(out.retry, StatusIs(absl::StatusCode::kFailedPrecondition,
                                  AllOf(HasSubstr("unusable"),
                                        HasSubstr(std::string(out.step_error.message())))));
  EXPECT_EQ(out.finished.code(), out.step_error.code()) << out.finished;
  EXPECT_LT(out.finish_time, kFinishBound);
  EXPECT_EQ(out.in_flight, 0);
  EXPECT_EQ(out.landed_after_close, 0);
}

TEST(PsSlowPeerTest, AStalledWorkerIsNamedByTheServerAndTheOtherWorker) {
  // Worker 1 (rank 2) stalls before its second computation until the
  // server and worker 0 have given up.
  std::vector<Outcome> out = RunJob(
      2, [](int, SlowPeerTransport&) {},
      [](int rank, int64_t clock, rdma::Store& store) -> absl::Status {
        if (rank != 2 || clock != 1) return absl::OkStatus();
        return store.Wait({"test/gave_up/0", "test/gave_up/1"}, absl::Seconds(60));
      });
  EXPECT_THAT(out[0].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("ps server 0 (rank 0) received no gradient"),
                             HasSubstr("from worker 1 (rank 2) at clock 1"))));
  EXPECT_THAT(out[1].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("ps worker 0 (rank 1) at clock 2"),
                             HasSubstr("permission"),
                             HasSubstr("the slowest: worker 1 (rank 2) at clock 1"))));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectUnusableAndFinished(out[r]);
  }
}

TEST(PsSlowPeerTest, APullThatTimesOutIsCancelledAndNamesTheServer) {
  // The worker's second read of the parameters (67 floats of the toy
  // model, one shard) is held: the server never answers it.
  constexpr size_t kShardBytes = (8 * 4 + 8 + 3 * 8 + 3) * sizeof(float);
  std::vector<Outcome> out = RunJob(
      1,
      [&](int rank, SlowPeerTransport& slow) {
        if (rank != 1) return;
        SlowPeerTransport::Hold hold;
        hold.op = SlowPeerTransport::Op::kRead;
        hold.peer = 0;
        hold.length = kShardBytes;
        hold.nth = 2;
        slow.AddHold(hold);
      },
      [](int, int64_t, rdma::Store&) { return absl::OkStatus(); });
  EXPECT_EQ(out[1].held, 1);
  EXPECT_EQ(out[1].failed_clock, 1);  // step 1's pull
  EXPECT_THAT(out[1].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("'ps0/params' of rank 0"),
                             HasSubstr("a read from rank 0"),
                             HasSubstr("nothing of it lands later"))));
  // The server waited for step 1's gradient in vain.
  EXPECT_THAT(out[0].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("worker 0 (rank 1)")));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectUnusableAndFinished(out[r]);
  }
  // The parameters the worker was left with were not written afterwards.
  ASSERT_EQ(out[1].params_after_error.size(), out[1].params_later.size());
  for (size_t i = 0; i < out[1].params_later.size(); ++i) {
    EXPECT_TRUE(at::equal(out[1].params_after_error[i], out[1].params_later[i])) << i;
  }
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
