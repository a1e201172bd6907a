// The all-reduce strategy's overlap=forward with its ranks as threads over
// loopback: the head's later buckets are all-reduced while the next step's
// features run (the features of every step after the first watch the
// deferred all-reduce begin before they return), and the replicas still
// end with exactly the parameters of one process training on the
// concatenated batches, also when the model is shared between steps; where
// it cannot run it says why.
#include "ATen/Parallel.h"
#include "ATen/ops/zeros.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/allreduce/forward_buckets.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/poll_until.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;

// What each rank saw.
struct ForwardRun {
  std::vector<std::vector<at::Tensor>> finals;  // by rank
  std::vector<std::vector<at::Tensor>> shared;  // by rank: after ShareModel()
  std::vector<int> deferred;
  std::vector<int64_t> forward_overlapped;
  std::vector<int64_t> overlapped;
  std::vector<double> wait_ms;  // summed over the steps' wait spans
};

// `world` replicas train `problem` for `steps` with overlap=forward and
// `bucket_bytes`, sharing the model after step `share_after` (-1: never).
ForwardRun TrainForward(const ToyProblem& problem, int world, int steps,
                        const std::string& bucket_bytes, const std::string& forward_bytes,
                        int share_after) {
  ForwardRun run;
  run.finals.resize(world);
  run.shared.resize(world);
  run.deferred.resize(world);
  run.forward_overlapped.resize(world);
  run.overlapped.resize(world);
  run.wait_ms.resize(world);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy,
                         AllReduceStrategy::Create(testing::ToyOptions(
                             steps, {{"overlap", "forward"}, {"bucket_bytes", bucket_bytes},
                                     {"chunk_bytes", "64"}, {"forward_bytes", forward_bytes}})));
        EXPECT_FALSE(strategy->needs_compute_fn());
        EXPECT_TRUE(strategy->shares_model());
        std::vector<Parameter> params = problem.MakeParameters();
        std::vector<at::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        int t = 0;  // the step whose batch is next
        bool pending = false;  // the step that runs has deferred buckets to reduce
        ModelSplit split = ToyProblem::Split(p);
        split.features = [&](const at::Tensor& x) {
          if (pending) {
            // The last step's deferred all-reduce begins while this runs.
            absl::StatusOr<bool> begun = PollUntil(
                [&]() -> absl::StatusOr<bool> { return strategy->buckets_begun() > 0; },
                absl::Now() + absl::Seconds(30));
            EXPECT_TRUE(begun.ok() && *begun) << "rank " << rank << " step " << t - 1;
          }
          return ToyProblem::Features(p, x);
        };
        StrategyContext context{rank, world, &transport, &store};
        context.split = &split;
        context.next_batch = problem.NextBatch(rank, &t);
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        RETURN_IF_ERROR(strategy->Start());
        run.deferred[rank] = strategy->deferred_buckets();
        while (!strategy->done()) {
          ASSIGN_OR_RETURN(StepReport report, strategy->Step(nullptr));
          run.wait_ms[rank] += absl::ToDoubleMilliseconds(report.wait_time);
          pending = strategy->deferred_buckets() > 0;
          if (report.clock == share_after) {
            RETURN_IF_ERROR(strategy->ShareModel());
            pending = false;
            for (const Parameter& param : params) {
              run.shared[rank].push_back(param.tensor.detach().clone());
            }
          }
        }
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& param : params) {
          run.finals[rank].push_back(param.tensor.detach().clone());
        }
        run.forward_overlapped[rank] = strategy->forward_overlapped_buckets();
        run.overlapped[rank] = strategy->overlapped_buckets();
        return absl::OkStatus();
      });
  for (const absl::Status& status : statuses) EXPECT_OK(status);
  return run;
}

// world, bucket_bytes, forward_bytes, deferred parts.
class ForwardOverlapTest
    : public ::testing::TestWithParam<std::tuple<int, std::string, std::string, int>> {};

// Buckets of 4 bytes put each tensor in one of its own: backward completes
// b2, w2 (the head's), then b1, w1; w2 is deferred, whole within 1 KiB,
// and within 64 bytes its last 64 of 96 bytes (its first 32 go in the
// step, and the bucket is applied once both are summed). One bucket of
// everything (0) mixes head and features: nothing is deferred, and the
// step is overlap=on's.
TEST_P(ForwardOverlapTest, TrainsAsOneProcessOnTheConcatenatedBatches) {
  at::set_num_threads(1);
  const auto& [world, bucket, forward_bytes, deferred] = GetParam();
  constexpr int kSteps = 6, kBatch = 8, kShareAfter = 2;
  const ToyProblem problem(world, kSteps, kBatch);
  const ForwardRun run = TrainForward(problem, world, kSteps, bucket, forward_bytes, kShareAfter);
  if (HasFailure()) return;
  std::vector<int> everyone;
  for (int w = 0; w < world; ++w) everyone.push_back(w);
  const std::vector<at::Tensor> reference = problem.Reference(everyone, kSteps, 0.1, 0.9);
  const std::vector<at::Tensor> at_share =
      problem.Reference(everyone, kShareAfter + 1, 0.1, 0.9);
  EXPECT_GT(ToyProblem::MaxDiff(reference, problem.init), 1e-3);  // it trained
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(run.deferred[r], deferred);
    EXPECT_LT(ToyProblem::MaxDiff(run.finals[r], reference), 1e-5);
    EXPECT_LT(ToyProblem::MaxDiff(run.shared[r], at_share), 1e-5);
    // Every step with a deferred bucket pending (all but the first and the
    // one after the share) began it before its features returned.
    EXPECT_EQ(run.forward_overlapped[r], deferred > 0 ? (kSteps - 2) * deferred : 0);
    // A pending step's compute waits for its deferred buckets: they
    // overlap it.
    EXPECT_GE(run.overlapped[r], run.forward_overlapped[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndBuckets, ForwardOverlapTest,
                         ::testing::Values(std::make_tuple(2, "4", "1K", 1),
                                           std::make_tuple(3, "4", "1K", 1),
                                           std::make_tuple(2, "4", "64", 1),
                                           std::make_tuple(2, "0", "1K", 0)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "ranks_bucket",
                                               std::get<1>(info.param), "_forward",
                                               std::get<2>(info.param));
                         });

// The VGG-like net's buckets of 4 MiB, in backward's order: fc3 and fc2's
// bias, fc2's weight, fc1's bias, fc1's weight (the head), the convolutions.
std::vector<collectives::Bucket> VggBuckets() {
  const std::vector<size_t> sizes = {45120, 4194304, 4096, 12845056, 300000};
  std::vector<collectives::Bucket> buckets;
  size_t offset = 0;
  for (size_t b = 0; b < sizes.size(); ++b) {
    buckets.push_back({b, b + 1, offset, sizes[b]});
    offset += sizes[b];
  }
  return buckets;
}

TEST(ForwardScheduleTest, DefersTheTailOfWhatBackwardCompletesLast) {
  const std::vector<collectives::Bucket> buckets = VggBuckets();
  const std::vector<bool> head = {true, true, true, true, false};
  // A third of the bytes (5,796,192) from fc1's weight, backward's last
  // head bucket, cut to 64 bytes: the rest of it and fc2 go in the step.
  const ForwardSchedule automatic = ScheduleForForward(buckets, head, kAutoBudget);
  EXPECT_EQ(automatic.deferred, (std::vector<BucketPart>{{3, 7048896, 5796160}}));
  EXPECT_EQ(automatic.in_step, (std::vector<BucketPart>{{0, 0, 45120},
                                                        {1, 0, 4194304},
                                                        {2, 0, 4096},
                                                        {3, 0, 7048896},
                                                        {4, 0, 300000}}));
  EXPECT_EQ(automatic.applied_late, std::vector<size_t>{3});
  EXPECT_EQ(automatic.applied_in_step, (std::vector<size_t>{0, 1, 2, 4}));
  EXPECT_EQ(automatic.deferred_bytes, 5796160);
  // Whole buckets while they fit, back to the second head bucket: the
  // first stays, whatever the budget; features never wait.
  const ForwardSchedule all = ScheduleForForward(buckets, head, int64_t{1} << 40);
  EXPECT_EQ(all.deferred, (std::vector<BucketPart>{{1, 0, 4194304}, {2, 0, 4096},
                                                   {3, 0, 12845056}}));
  EXPECT_EQ(all.in_step, (std::vector<BucketPart>{{0, 0, 45120}, {4, 0, 300000}}));
  EXPECT_EQ(all.applied_late, (std::vector<size_t>{1, 2, 3}));
  // Two whole buckets and the tail of the one before them; nothing after
  // the bucket that is cut.
  const ForwardSchedule cut = ScheduleForForward(buckets, head, 12845056 + 4096 + 1000);
  EXPECT_EQ(cut.deferred, (std::vector<BucketPart>{{1, 4194304 - 960, 960}, {2, 0, 4096},
                                                   {3, 0, 12845056}}));
  EXPECT_EQ(cut.in_step.front(), (BucketPart{0, 0, 45120}));
  EXPECT_EQ(cut.in_step[1], (BucketPart{1, 0, 4194304 - 960}));
  EXPECT_EQ(cut.deferred_bytes, 960 + 4096 + 12845056);
  // Under 64 bytes of budget defers nothing.
  const ForwardSchedule none = ScheduleForForward(buckets, head, 63);
  EXPECT_TRUE(none.deferred.empty());
  EXPECT_EQ(none.in_step.size(), buckets.size());
  EXPECT_EQ(none.applied_in_step.size(), buckets.size());
  EXPECT_TRUE(ScheduleForForward(buckets, head, 0).deferred.empty());
  // No head bucket (a split the buckets straddle): nothing waits.
  EXPECT_TRUE(ScheduleForForward(buckets, std::vector<bool>(5, false), kAutoBudget)
                  .deferred.empty());
}

// From tensors, bucketed as the group buckets them (4 MiB): fc3's weight
// and bias and fc2's bias share a bucket, fc2's weight and fc1's bias and
// weight have one each.
TEST(ForwardScheduleTest, BucketsTensorsAsTheGroupDoes) {
  const std::vector<size_t> bytes = {40, 40960, 4096, 4194304, 4096, 12845056, 256, 73728};
  const std::vector<bool> head = {true, true, true, true, true, true, false, false};
  ASSERT_OK_AND_ASSIGN(ForwardSchedule schedule,
                       ScheduleTensorsForForward(bytes, head, 4 << 20, kAutoBudget));
  // A third of 17,162,560 bytes, cut to 64: the tail of fc1's weight.
  EXPECT_EQ(schedule.deferred, (std::vector<BucketPart>{{3, 12845056 - 5720832, 5720832}}));
  EXPECT_EQ(schedule.in_step.size(), 5u);
  EXPECT_EQ(schedule.deferred_bytes, 5720832);
  EXPECT_THAT(ScheduleTensorsForForward(bytes, {true}, 4 << 20, kAutoBudget).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("head flags")));
}

TEST(ForwardOverlapTest, IsRefusedWhereItCannotRun) {
  StrategyOptions with_codec = testing::ToyOptions(1, {{"overlap", "forward"}});
  with_codec.codec = "topk:ratio=0.25";
  EXPECT_THAT(AllReduceStrategy::Create(with_codec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("overlap=on or drop the codec")));
  EXPECT_THAT(AllReduceStrategy::Create(testing::ToyOptions(1, {{"overlap", "backward"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("forward")));
  EXPECT_THAT(AllReduceStrategy::Create(testing::ToyOptions(1, {{"forward_bytes", "1M"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("budget of overlap=forward")));
  EXPECT_THAT(AllReduceStrategy::Create(testing::ToyOptions(
                                            1, {{"overlap", "forward"}, {"forward_bytes", "x"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("or auto")));
  ASSERT_OK_AND_ASSIGN(auto forward,
                       AllReduceStrategy::Create(testing::ToyOptions(1, {{"overlap", "forward"}})));
  EXPECT_TRUE(forward->runs_split());
  EXPECT_TRUE(forward->takes_device_parameters());
  ASSERT_OK_AND_ASSIGN(auto on, AllReduceStrategy::Create(testing::ToyOptions(1, {})));
  EXPECT_FALSE(on->runs_split());
  // No split in the context (a model the trainer could not cut).
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(
                                            testing::ToyOptions(1, {{"overlap", "forward"}})));
        std::vector<Parameter> params = {{"w", at::zeros({3})}};
        // Refused in Prepare(), before anything connects.
        return strategy->Prepare({rank, 1, &transport, &store}, params).status();
      });
  EXPECT_THAT(status[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                  ::testing::HasSubstr("no split (the model's features and "
                                                       "head) (use overlap=on)")));
}

}  // namespace
}  // namespace rdmaflow::strategies
