// Layer-separated training with one rank slower than the timeout (the
// slow-peer suite): 1 conv rank (0) + 1 FC rank (1) as threads over
// loopback, the toy perceptron, 1 s timeout. At step 1 either the conv
// rank stalls before its batch (its activations do not come) or the FC
// rank stalls in the head (the activations' gradients do not come), until
// a store key says the other rank gave up. The waiting rank gets
// kDeadlineExceeded naming the tensor and the slow rank; then, as
// documented, each rank is unusable (Step() refused quoting the failure),
// Finish() returns the failure within its bound (the communicator's drain
// and barrier, each at most the timeout) without the final all-reduce, and
// nothing a rank posted is still in flight.
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/layer_separated/layer_separated_strategy.h"
#include "strategies/testing/slow_peer_transport.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::layer_separated {
namespace {

using ::rdmaflow::strategies::testing::SlowPeerTransport;
using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kRanks = 2, kSteps = 3, kBatch = 6, kStallStep = 1;
constexpr absl::Duration kTimeout = absl::Seconds(1);

struct Outcome {
  absl::Status step_error, retry, finished;
  absl::Duration finish_time;
  int64_t in_flight = -1;
};

// Rank `slow` stalls at step kStallStep until the other rank gave up.
std::vector<Outcome> RunWithSlowRank(int slow) {
  at::set_num_threads(1);
  const ToyProblem problem(kRanks, kSteps, kBatch);
  std::vector<Outcome> outcome(kRanks);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        SlowPeerTransport counted(transport);  // holds nothing: counts
        Outcome& out = outcome[rank];
        StrategyOptions options = testing::ToyOptions(kSteps, {{"fc_ranks", "1"}});
        options.communicator_options.timeout = kTimeout;
        ASSIGN_OR_RETURN(auto strategy, LayerSeparatedStrategy::Create(options));
        std::vector<Parameter> params = problem.MakeParameters();
        std::vector<at::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        int t = 0, heads = 0;
        const std::string other_gave_up = absl::StrCat("test/gave_up/", 1 - rank);
        auto stall = [&](int step) -> absl::Status {
          if (rank != slow || step != kStallStep) return absl::OkStatus();
          return store.Wait({other_gave_up}, absl::Seconds(60));
        };
        absl::Status stalled;  // a failed stall inside the head
        ModelSplit split;
        split.features = [&p](const at::Tensor& x) { return ToyProblem::Features(p, x); };
        split.head = [&](const at::Tensor& h) {
          if (absl::Status s = stall(heads++); !s.ok()) stalled = s;
          return ToyProblem::Head(p, h);
        };
        split.head_parameters = {"w2", "b2"};
        split.sample_shape = {4};
        split.activation_shape = {8};
        StrategyContext context{rank, kRanks, &counted, &store};
        context.batch_size = kBatch;
        context.split = &split;
        context.next_batch = [&]() -> absl::StatusOr<Batch> {
          RETURN_IF_ERROR(stall(t));
          Batch batch{problem.x[rank][t], problem.y[rank][t]};
          ++t;
          return batch;
        };
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        RETURN_IF_ERROR(strategy->Start());
        while (!strategy->done()) {
          absl::StatusOr<StepReport> report = strategy->Step(nullptr);
          if (!report.ok()) {
            out.step_error = report.status();
            break;
          }
        }
        RETURN_IF_ERROR(stalled);
        RETURN_IF_ERROR(store.Set(absl::StrCat("test/gave_up/", rank), "1"));
        out.retry = strategy->Step(nullptr).status();
        const absl::Time begin = absl::Now();
        out.finished = strategy->Finish();
        out.finish_time = absl::Now() - begin;
        out.in_flight = counted.outstanding(1 - rank);
        return absl::OkStatus();
      });
  for (int r = 0; r < kRanks; ++r) EXPECT_OK(status[r]) << "rank " << r;
  return outcome;
}

void ExpectUnusableAndFinished(const Outcome& out) {
  ASSERT_FALSE(out.step_error.ok());
  EXPECT_THAT(out.retry, StatusIs(absl::StatusCode::kFailedPrecondition,
                                  AllOf(HasSubstr("unusable"),
                                        HasSubstr(std::string(out.step_error.message())))));
  EXPECT_EQ(out.finished.code(), out.step_error.code()) << out.finished;
  EXPECT_LT(out.finish_time, 2 * kTimeout + absl::Seconds(5));
  EXPECT_EQ(out.in_flight, 0);
}

TEST(LayerSeparatedSlowPeerTest, AStalledConvRankIsNamedByItsFcRank) {
  std::vector<Outcome> out = RunWithSlowRank(/*slow=*/0);
  EXPECT_THAT(out[1].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 has not delivered step 1"), HasSubstr("act"))));
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectUnusableAndFinished(out[r]);
  }
}

TEST(LayerSeparatedSlowPeerTest, AStalledFcRankIsNamedByItsConvRank) {
  std::vector<Outcome> out = RunWithSlowRank(/*slow=*/1);
  EXPECT_THAT(out[0].step_error,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 1 has not delivered step 1"), HasSubstr("grad"))));
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectUnusableAndFinished(out[r]);
  }
}

}  // namespace
}  // namespace rdmaflow::strategies::layer_separated
