// Layer-separated training with its ranks as threads over loopback, on the
// toy perceptron split after its hidden layer: C conv ranks and K FC ranks
// end (every rank, after Finish) with the parameters of one process
// training on the C conv ranks' batches concatenated (1e-5), for 1+1, 3+1
// and 2+2 ranks and with K chosen by the cost model; bad set-ups are named.
// With overlap=on (Stanza's pipeline) they end with the parameters of one
// process running the same pipelined schedule.
#include "ATen/Parallel.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/zeros_like.h"
#include "strategies/layer_separated/layer_separated_strategy.h"

#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/testing/connect_counter.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::layer_separated {
namespace {

using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;

constexpr int kSteps = 5, kBatch = 6;

StrategyOptions Options(std::map<std::string, std::string> params) {
  return testing::ToyOptions(kSteps, std::move(params));
}

struct Job {
  std::vector<absl::Status> status;
  std::vector<std::vector<at::Tensor>> finals;  // by rank
  std::vector<int> conv_ranks;                     // as each rank saw it
  std::vector<double> first_loss;
  std::vector<int64_t> codec_calls;  // by rank
  // By rank: endpoints its transport connected; its links' counts.
  std::vector<int64_t> connected;
  std::vector<onesided::PeerLinksStats> links;
};

Job RunJob(const ToyProblem& problem, int world, std::map<std::string, std::string> params,
           const std::string& codec = "") {
  Job job;
  job.finals.resize(world);
  job.codec_calls.resize(world, -1);
  job.conv_ranks.resize(world);
  job.first_loss.resize(world, -1);
  job.connected.resize(world);
  job.links.resize(world);
  job.status = rdma::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& fabric, rdma::Store& store) -> absl::Status {
        rdma::testing::ConnectCounter transport(fabric);
        StrategyOptions options = Options(params);
        options.codec = codec;
        ASSIGN_OR_RETURN(auto strategy, LayerSeparatedStrategy::Create(options));
        std::vector<Parameter> params = problem.MakeParameters();
        std::vector<at::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        ModelSplit split;
        split.features = [&p](const at::Tensor& x) { return ToyProblem::Features(p, x); };
        split.head = [&p](const at::Tensor& h) { return ToyProblem::Head(p, h); };
        split.head_parameters = {"w2", "b2"};
        split.sample_shape = {4};
        split.activation_shape = {8};
        int t = 0;
        StrategyContext context{rank, world, &transport, &store};
        context.batch_size = kBatch;
        context.split = &split;
        context.next_batch = [&]() -> absl::StatusOr<Batch> {
          Batch batch{problem.x[rank][t], problem.y[rank][t]};
          ++t;
          return batch;
        };
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        job.conv_ranks[rank] = strategy->layout().conv_ranks;
        RETURN_IF_ERROR(strategy->Start());
        while (!strategy->done()) {
          ASSIGN_OR_RETURN(StepReport report, strategy->Step(nullptr));
          if (report.clock == 0) job.first_loss[rank] = report.compute.loss;
        }
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& param : params) job.finals[rank].push_back(param.tensor.detach().clone());
        job.codec_calls[rank] = strategy->compression().calls;
        job.connected[rank] = transport.connected();
        job.links[rank] = strategy->link_stats();
        return absl::OkStatus();
      });
  return job;
}

void ExpectMatchesReference(const ToyProblem& problem, const Job& job, int world) {
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  const int conv = job.conv_ranks[0];
  std::vector<int> convs;
  for (int i = 0; i < conv; ++i) convs.push_back(i);
  const std::vector<at::Tensor> reference = problem.Reference(convs, kSteps, 0.1, 0.9);
  EXPECT_GT(ToyProblem::MaxDiff(reference, problem.init), 1e-3);  // it trained
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(job.conv_ranks[r], conv);
    EXPECT_LT(ToyProblem::MaxDiff(job.finals[r], reference), 1e-5) << "rank " << r;
    // The communicator, the ring over everyone and the group's all-reduce
    // share the links: every endpoint is theirs, at most a data lane per
    // peer and a control lane to a ring's left neighbour, and one watch
    // per peer.
    EXPECT_EQ(job.connected[r], job.links[r].endpoints) << "rank " << r;
    EXPECT_LE(job.links[r].endpoints, 2 * (world - 1)) << "rank " << r;
    EXPECT_LE(job.links[r].watches, world - 1) << "rank " << r;
    EXPECT_GT(job.links[r].watches, 0) << "rank " << r;
  }
  // The loss the conv ranks report is their batch's, computed on the FC rank.
  std::vector<at::Tensor> p0(problem.init.begin(), problem.init.end());
  EXPECT_NEAR(job.first_loss[0],
              ToyProblem::Loss(p0, problem.x[0][0], problem.y[0][0]).item<double>(), 1e-5);
}

// One process running overlap=on's schedule on the conv ranks' batches
// concatenated: batch t+1 is forwarded before the features' update of batch
// t, and batch t's backward runs on the features as they are when its
// gradients arrive (updated in place, as the group's flat storage is,
// without a new version for autograd). The head trains on each batch in
// turn. SGD with momentum as DataParallelGroup::ApplySgd.
std::vector<at::Tensor> PipelinedReference(const ToyProblem& problem, int convs, int steps,
                                           double lr, double momentum) {
  std::vector<at::Tensor> p, velocity;
  for (const at::Tensor& t : problem.init) {
    p.push_back(t.clone().requires_grad_(true));
    velocity.push_back(at::zeros_like(t));
  }
  auto batch = [&](int t, bool labels) {
    std::vector<at::Tensor> parts;
    for (int w = 0; w < convs; ++w) parts.push_back(labels ? problem.y[w][t] : problem.x[w][t]);
    return at::cat(parts);
  };
  auto update = [&](size_t i) {
    at::Tensor value = p[i].data();  // the storage, outside autograd's versions
    velocity[i].mul_(momentum).add_(p[i].grad());
    value.add_(velocity[i], -lr);
    p[i].mutable_grad() = at::Tensor();
  };
  at::Tensor act = ToyProblem::Features(p, batch(0, false));
  for (int t = 0; t < steps; ++t) {
    at::Tensor ahead = t + 1 < steps ? ToyProblem::Features(p, batch(t + 1, false)) : at::Tensor();
    at::Tensor a = act.detach().requires_grad_(true);
    at::cross_entropy_loss(ToyProblem::Head(p, a), batch(t, true), {}, at::Reduction::None)
        .sum()
        .div(static_cast<double>(kBatch * convs))
        .backward();
    update(2);
    update(3);
    act.backward(a.grad());
    update(0);
    update(1);
    act = ahead;
  }
  for (at::Tensor& t : p) t = t.detach();
  return p;
}

void ExpectPipelined(const ToyProblem& problem, const Job& job, int world, int convs) {
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  const std::vector<at::Tensor> pipelined =
      PipelinedReference(problem, convs, kSteps, 0.1, 0.9);
  std::vector<int> all;
  for (int i = 0; i < convs; ++i) all.push_back(i);
  const std::vector<at::Tensor> plain = problem.Reference(all, kSteps, 0.1, 0.9);
  // The schedules differ, by more than the tolerance below.
  EXPECT_GT(ToyProblem::MaxDiff(pipelined, plain), 1e-4);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(job.conv_ranks[r], convs);
    EXPECT_LT(ToyProblem::MaxDiff(job.finals[r], pipelined), 1e-5) << "rank " << r;
  }
}

TEST(LayerSeparatedTest, OverlapRunsStanzasPipeline) {
  at::set_num_threads(1);
  const ToyProblem problem(2, kSteps, kBatch);
  ExpectPipelined(problem, RunJob(problem, 2, {{"fc_ranks", "1"}, {"overlap", "on"}}), 2, 1);
}

TEST(LayerSeparatedTest, OverlapWithThreeConvRanksAndTwoFcRanks) {
  at::set_num_threads(1);
  const ToyProblem problem(4, kSteps, kBatch);
  ExpectPipelined(problem, RunJob(problem, 4, {{"fc_ranks", "1"}, {"overlap", "on"}}), 4, 3);
  const ToyProblem two(4, kSteps, kBatch);
  ExpectPipelined(two, RunJob(two, 4, {{"fc_ranks", "2"}, {"overlap", "on"}}), 4, 2);
}

TEST(LayerSeparatedTest, OneConvOneFcEqualsOneProcess) {
  at::set_num_threads(1);
  const ToyProblem problem(2, kSteps, kBatch);
  ExpectMatchesReference(problem, RunJob(problem, 2, {{"fc_ranks", "1"}}), 2);
}

TEST(LayerSeparatedTest, ThreeConvOneFcEqualsTheConcatenatedBatch) {
  at::set_num_threads(1);
  const ToyProblem problem(4, kSteps, kBatch);
  ExpectMatchesReference(problem, RunJob(problem, 4, {{"fc_ranks", "1"}, {"chunk_bytes", "64"}}), 4);
}

// The convolutional ranks' gradients go through the codec; the FC rank's
// head never leaves it. The conv replicas stay identical and train.
TEST(LayerSeparatedTest, TheConvGroupSendsItsGradientsThroughACodec) {
  at::set_num_threads(1);
  const ToyProblem problem(3, kSteps, kBatch);
  const Job job = RunJob(problem, 4, {{"fc_ranks", "1"}}, "topk:ratio=0.5");
  for (const absl::Status& s : job.status) ASSERT_OK(s);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(job.codec_calls[r], kSteps) << "rank " << r;
    EXPECT_GT(ToyProblem::MaxDiff(job.finals[r], problem.init), 1e-3) << "rank " << r;
    EXPECT_EQ(ToyProblem::MaxDiff(job.finals[r], job.finals[0]), 0.0) << "rank " << r;
  }
  EXPECT_EQ(job.codec_calls[3], 0);  // the FC rank's group is dense
}

TEST(LayerSeparatedTest, TwoFcRanksAllReduceTheHead) {
  at::set_num_threads(1);
  const ToyProblem problem(4, kSteps, kBatch);
  Job job = RunJob(problem, 4, {{"fc_ranks", "2"}});
  EXPECT_EQ(job.conv_ranks[0], 2);
  ExpectMatchesReference(problem, job, 4);
}

TEST(LayerSeparatedTest, TheCostModelPicksKAndAllRanksAgree) {
  at::set_num_threads(1);
  const ToyProblem problem(3, kSteps, kBatch);
  Job job = RunJob(problem, 3, {});
  ExpectMatchesReference(problem, job, 3);
}

TEST(LayerSeparatedTest, BadSetUpsAreNamed) {
  EXPECT_THAT(LayerSeparatedStrategy::Create(Options({{"fc_ranks", "0"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("fc_ranks")));
  EXPECT_THAT(LayerSeparatedStrategy::Create(Options({{"overlap", "yes"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("overlap")));
  EXPECT_THAT(LayerSeparatedStrategy::Create(Options({{"split", "3"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("known")));
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, LayerSeparatedStrategy::Create(Options({})));
        return strategy->Prepare({rank, 2, &transport, &store}, {}).status();
      });
  EXPECT_THAT(status[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                  ::testing::HasSubstr("model split")));
}

}  // namespace
}  // namespace rdmaflow::strategies::layer_separated
