// The all-reduce strategy with one replica slower than the timeout (the
// slow-peer suite): three ranks as threads, 1 s timeout; rank 2's compute
// at step 1 waits until ranks 0 and 1 have given up (store keys, no
// sleeps). The waiting ranks get kDeadlineExceeded from the ring naming the
// stalled peer; as documented, the strategy is then unusable (a later
// Step() is refused naming the failure) and Finish() tears it down without
// waiting for anyone, within the bound; nothing a rank posted is in flight
// once it has finished. The slow rank, resuming, fails too and finishes.
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/testing/slow_peer_transport.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::strategies::testing::SlowPeerTransport;
using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kRanks = 3, kSteps = 3, kBatch = 4, kSlow = 2, kStallStep = 1;
constexpr absl::Duration kTimeout = absl::Seconds(1);

TEST(AllReduceSlowPeerTest, WaitingReplicasTimeOutNamingTheSlowOneAndFinishAtOnce) {
  at::set_num_threads(1);
  const ToyProblem problem(kRanks, kSteps, kBatch);
  std::vector<absl::Status> step_error(kRanks), retry(kRanks), finished(kRanks);
  std::vector<absl::Duration> finish_time(kRanks);
  std::vector<int64_t> in_flight(kRanks, -1);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        SlowPeerTransport counted(transport);  // holds nothing: counts
        StrategyOptions options = testing::ToyOptions(kSteps, {{"chunk_bytes", "64"}});
        options.communicator_options.timeout = kTimeout;
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(options));
        std::vector<Parameter> params = problem.MakeParameters();
        RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &counted, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        const ComputeFn train = problem.Compute(params, rank);
        int step = 0;
        ComputeFn compute = [&]() -> absl::StatusOr<ComputeResult> {
          if (rank == kSlow && step == kStallStep) {
            RETURN_IF_ERROR(store.Wait({"test/gave_up/0", "test/gave_up/1"}, absl::Seconds(60)));
          }
          ++step;
          return train();
        };
        while (!strategy->done()) {
          absl::StatusOr<StepReport> report = strategy->Step(compute);
          if (!report.ok()) {
            step_error[rank] = report.status();
            break;
          }
        }
        if (rank != kSlow) RETURN_IF_ERROR(store.Set(absl::StrCat("test/gave_up/", rank), "1"));
        if (!step_error[rank].ok()) retry[rank] = strategy->Step(compute).status();
        const absl::Time begin = absl::Now();
        finished[rank] = strategy->Finish();
        finish_time[rank] = absl::Now() - begin;
        int64_t outstanding = 0;
        for (int peer = 0; peer < kRanks; ++peer) outstanding += counted.outstanding(peer);
        in_flight[rank] = outstanding;
        // A rank's transport dies with its thread: the waiting ranks stay
        // until both have given up, so each times out rather than finding
        // the other gone (which one is first is a race of microseconds).
        return store.Wait({"test/gave_up/0", "test/gave_up/1"}, absl::Seconds(60));
      });
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_OK(status[r]);
    EXPECT_FALSE(step_error[r].ok());
    // Unusable after the error, and says why.
    EXPECT_THAT(retry[r], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("unusable"), HasSubstr(std::string(
                                                                    step_error[r].message())))));
    // Finish() does not wait for the others (no barrier after a failure)
    // and reports the failure.
    EXPECT_EQ(finished[r].code(), step_error[r].code());
    EXPECT_LT(finish_time[r], kTimeout + absl::Seconds(5));
    EXPECT_EQ(in_flight[r], 0);
  }
  // The slow rank's right neighbour waits on it alone: its error names it.
  EXPECT_THAT(step_error[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                      AllOf(HasSubstr("all-reduce"), HasSubstr("from rank 2"))));
  EXPECT_THAT(step_error[1], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("all-reduce")));
  EXPECT_THAT(step_error[kSlow], Not(StatusIs(absl::StatusCode::kOk)));
}

}  // namespace
}  // namespace rdmaflow::strategies
