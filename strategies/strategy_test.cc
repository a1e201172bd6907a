// The Strategy base's state machine, on a fake strategy that records what
// the base let through: calls out of order are refused with the same
// messages for every strategy, a failed step leaves the rank unusable and
// Finish() returns its failure, a failed Prepare() may be retried.
#include "ATen/ops/ones.h"
#include "strategies/strategy.h"

#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Runs `steps` steps; fails the Do*() calls it is told to.
class FakeStrategy final : public Strategy {
 public:
  explicit FakeStrategy(int64_t steps) : Strategy(Options(steps)) {}

  std::string name() const override { return "fake"; }
  std::string role() const override { return "peer"; }
  bool computes() const override { return true; }
  int workers() const override { return context().world_size; }
  int worker_index() const override { return context().rank; }
  runtime::TransferCounters counters() const override { return {}; }

  bool shares_model() const override { return share; }

  absl::Status fail_prepare, fail_start, fail_step, fail_share;
  // DoPrepare or DoFinish throw what torch throws for a bad shape (a
  // device's allocation failing, say).
  bool throw_in_prepare = false, throw_in_finish = false;
  bool share = false;
  int prepares = 0, starts = 0, steps = 0, finishes = 0, shares = 0;
  bool finished_after_failure = false;
  std::vector<int64_t> clocks;  // clock() in each DoStep

 private:
  static StrategyOptions Options(int64_t steps) {
    StrategyOptions options;
    options.steps = steps;
    return options;
  }
  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter>) override {
    ++prepares;
    if (throw_in_prepare) Throw();
    RETURN_IF_ERROR(fail_prepare);
    return graph::GraphDef();
  }
  absl::Status DoStart() override {
    ++starts;
    return fail_start;
  }
  absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) override {
    ++steps;
    clocks.push_back(clock());
    RETURN_IF_ERROR(fail_step);
    StepReport report;
    ASSIGN_OR_RETURN(report.compute, compute());
    return report;
  }
  absl::Status DoShareModel() override {
    ++shares;
    return fail_share;
  }
  absl::Status DoFinish(bool after_failure) override {
    ++finishes;
    finished_after_failure = after_failure;
    if (throw_in_finish) Throw();
    return absl::OkStatus();
  }
  static void Throw() { at::ones({2, 3}).matmul(at::ones({2, 3})); }
};

const ComputeFn kCompute = []() -> absl::StatusOr<ComputeResult> { return ComputeResult{}; };

// Runs `body` with a rank-0-of-2 context over loopback.
void WithContext(const std::function<void(const StrategyContext&)>& body) {
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        body(StrategyContext{1, 2, &transport, &store});
        return absl::OkStatus();
      });
  ASSERT_OK(status[0]);
}

TEST(StrategyTest, CallsOutOfOrderAreRefusedNamingWhatToCallFirst) {
  FakeStrategy s(2);
  EXPECT_THAT(s.Start(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("fake: Start() before Prepare(): call Prepare()")));
  EXPECT_THAT(s.Step(kCompute).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("fake: Step() before Start(): call Prepare() and Start()")));
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    EXPECT_THAT(s.Prepare(context, {}).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("fake rank 1: Prepare() called twice")));
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("fake rank 1: Step() before Start()")));
    ASSERT_OK(s.Start());
    EXPECT_THAT(s.Start(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("fake rank 1: Start() called twice")));
    while (!s.done()) ASSERT_OK(s.Step(kCompute).status());
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("fake rank 1 already ran its 2 steps")));
    ASSERT_OK(s.Finish());
    EXPECT_OK(s.Finish());  // idempotent
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("after Finish()")));
  });
  EXPECT_EQ(s.prepares, 1);
  EXPECT_EQ(s.starts, 1);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.clocks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.finishes, 1);
  EXPECT_FALSE(s.finished_after_failure);
}

TEST(StrategyTest, PrepareChecksTheContextAndMayBeRetriedAfterAFailure) {
  FakeStrategy s(1);
  EXPECT_THAT(s.Prepare(StrategyContext{0, 1, nullptr, nullptr}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("fake needs a transport and a store")));
  WithContext([&](const StrategyContext& context) {
    StrategyContext outside = context;
    outside.rank = 2;
    EXPECT_THAT(s.Prepare(outside, {}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("rank 2 is not one of a job of 2 ranks")));
    s.fail_prepare = absl::InvalidArgumentError("too few ranks");
    EXPECT_THAT(s.Prepare(context, {}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too few ranks")));
    s.fail_prepare = absl::OkStatus();
    EXPECT_OK(s.Prepare(context, {}).status());
    EXPECT_OK(s.Start());
  });
  EXPECT_EQ(s.prepares, 2);  // the context checks ran before DoPrepare
}

TEST(StrategyTest, AFailedStepLeavesTheRankUnusableAndFinishReturnsTheFailure) {
  FakeStrategy s(3);
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    ASSERT_OK(s.Start());
    ASSERT_OK(s.Step(kCompute).status());
    s.fail_step = absl::DeadlineExceededError("rank 0 has not delivered step 1");
    EXPECT_THAT(s.Step(kCompute).status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
    s.fail_step = absl::OkStatus();
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("fake rank 1 is unusable after a failed step"),
                               HasSubstr("rank 0 has not delivered step 1"))));
    EXPECT_THAT(s.Start(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
    EXPECT_FALSE(s.done());
    EXPECT_THAT(s.Finish(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                     HasSubstr("rank 0 has not delivered step 1")));
    EXPECT_OK(s.Finish());
  });
  EXPECT_EQ(s.steps, 2);  // the refused one never reached DoStep
  EXPECT_EQ(s.finishes, 1);
  EXPECT_TRUE(s.finished_after_failure);
}

// ShareModel(): in order, only where the strategy shares, and a failed
// one leaves the rank unusable as a failed step does.
TEST(StrategyTest, ShareModelRunsBetweenStepsWhereTheStrategyShares) {
  FakeStrategy s(3);
  EXPECT_THAT(s.ShareModel(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("fake: ShareModel() before Start()")));
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    EXPECT_THAT(s.ShareModel(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("fake rank 1: ShareModel() before Start()")));
    ASSERT_OK(s.Start());
    ASSERT_OK(s.Step(kCompute).status());
    EXPECT_OK(s.ShareModel());  // nothing to share
    EXPECT_EQ(s.shares, 0);
    s.share = true;
    EXPECT_OK(s.ShareModel());
    EXPECT_EQ(s.shares, 1);
    ASSERT_OK(s.Step(kCompute).status());
    s.fail_share = absl::DeadlineExceededError("rank 0 never joined the model's all-reduce");
    EXPECT_THAT(s.ShareModel(),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         AllOf(HasSubstr("fake rank 1: sharing the model between steps"),
                               HasSubstr("--eval_every"), HasSubstr("never joined"))));
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("unusable"), HasSubstr("never joined"))));
    EXPECT_THAT(s.ShareModel(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
    EXPECT_THAT(s.Finish(), StatusIs(absl::StatusCode::kDeadlineExceeded));
    EXPECT_THAT(s.ShareModel(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("after Finish()")));
  });
  EXPECT_EQ(s.shares, 2);
  EXPECT_EQ(s.steps, 2);
  EXPECT_TRUE(s.finished_after_failure);
}

TEST(StrategyTest, AFailedStartLeavesNothingToFinish) {
  FakeStrategy s(3);
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    s.fail_start = absl::UnavailableError("rank 0 is gone");
    EXPECT_THAT(s.Start(), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("unusable after a failed Start()"),
                               HasSubstr("rank 0 is gone"))));
    EXPECT_OK(s.Finish());
  });
  EXPECT_EQ(s.starts, 1);
  EXPECT_EQ(s.steps, 0);
  EXPECT_EQ(s.finishes, 0);
}

TEST(StrategyTest, AnExceptionFromTheModelsCodeIsAFailedStepNamingTheRank) {
  FakeStrategy s(3);
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    ASSERT_OK(s.Start());
    // What a user's TorchScript model does with a shape it does not take.
    const ComputeFn throwing = []() -> absl::StatusOr<ComputeResult> {
      return ComputeResult{at::ones({2, 3}).matmul(at::ones({2, 3})).sum().item<double>()};
    };
    EXPECT_THAT(s.Step(throwing).status(),
                StatusIs(absl::StatusCode::kInternal,
                         AllOf(HasSubstr("fake rank 1"), HasSubstr("a step threw"),
                               ::testing::Not(HasSubstr("Exception raised from")))));
    EXPECT_THAT(s.Step(kCompute).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
    EXPECT_THAT(s.Finish(), StatusIs(absl::StatusCode::kInternal));
  });
}

// Prepare() and Finish() run the strategy's own torch code too (device
// parameters are allocated and copied there): what it throws is an error
// naming the call, never an exception out of the strategy; a Prepare()
// that threw may be retried.
TEST(StrategyTest, AnExceptionInPrepareOrFinishIsAnError) {
  FakeStrategy s(1);
  WithContext([&](const StrategyContext& context) {
    s.throw_in_prepare = true;
    EXPECT_THAT(s.Prepare(context, {}).status(),
                StatusIs(absl::StatusCode::kInternal, HasSubstr("Prepare() threw")));
    s.throw_in_prepare = false;
    ASSERT_OK(s.Prepare(context, {}).status());
    ASSERT_OK(s.Start());
    s.throw_in_finish = true;
    EXPECT_THAT(s.Finish(), StatusIs(absl::StatusCode::kInternal, HasSubstr("Finish() threw")));
  });
}

TEST(StrategyTest, AMissingComputeFnIsRefusedWithoutSpoilingTheRank) {
  FakeStrategy s(1);
  WithContext([&](const StrategyContext& context) {
    ASSERT_OK(s.Prepare(context, {}).status());
    ASSERT_OK(s.Start());
    EXPECT_THAT(s.Step(nullptr).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a ComputeFn")));
    EXPECT_OK(s.Step(kCompute).status());
    EXPECT_TRUE(s.done());
    EXPECT_OK(s.Finish());
  });
  EXPECT_EQ(s.steps, 1);
}

}  // namespace
}  // namespace rdmaflow::strategies
