// Layer-separated training with its ranks as threads over loopback, on the
// toy perceptron split after its hidden layer: C conv ranks and K FC ranks
// end (every rank, after Finish) with the parameters of one process
// training on the C conv ranks' batches concatenated (1e-5), for 1+1, 3+1
// and 2+2 ranks and with K chosen by the cost model, also with device
// parameters on fake devices; bad set-ups are named.
// With overlap=on (Stanza's pipeline) they end with the parameters of one
// process running the same pipelined schedule.
#include "ATen/Parallel.h"
#include "ATen/ops/addmm.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/relu.h"
#include "ATen/ops/zeros_like.h"
#include "strategies/layer_separated/layer_separated_strategy.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/device/device_transport.h"
#include "rdma/device/testing/fake_device_rank.h"
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
  std::vector<int64_t> max_staleness;  // by rank: clock - min_clock
  std::vector<int64_t> codec_calls;  // by rank
  // By rank: endpoints its transport connected; its links' counts.
  std::vector<int64_t> connected;
  std::vector<onesided::PeerLinksStats> links;
  // By rank, by ShareModel() call: the rank's parameters right after it.
  std::vector<std::vector<std::vector<at::Tensor>>> shared;
  std::vector<int> on_device;  // by rank: Strategy::exchanges_on_device()
  std::vector<int> activations_on_device;  // by rank
  std::vector<int64_t> copies;             // by rank: the communicator's
};

using FeaturesFn = at::Tensor (*)(const std::vector<at::Tensor>&, const at::Tensor&);

// With `on_device`, each rank's transport is a DeviceTransport over a fake
// device of its own, on a "host" of its own (the fake device's IPC opens
// only in another process), and the parameters are device parameters;
// its connections are not counted then.
Job RunJob(const ToyProblem& problem, int world, std::map<std::string, std::string> params,
           const std::string& codec = "", FeaturesFn features = &ToyProblem::Features,
           int share_every = 0, bool on_device = false) {
  Job job;
  job.shared.resize(world);
  job.finals.resize(world);
  job.codec_calls.resize(world, -1);
  job.conv_ranks.resize(world);
  job.first_loss.resize(world, -1);
  job.max_staleness.resize(world, -1);
  job.connected.resize(world);
  job.links.resize(world);
  job.on_device.resize(world, -1);
  job.activations_on_device.resize(world, -1);
  job.copies.resize(world, -1);
  job.status = rdma::testing::RunRankThreadsOwning(
      world,
      [&](int rank, std::unique_ptr<rdma::Transport>& fabric, rdma::Store& store) -> absl::Status {
        rdma::device_path::testing::FakeDeviceRank device;
        if (on_device) {
          ASSIGN_OR_RETURN(device, rdma::device_path::testing::WrapInFakeDevice(
                                       std::move(fabric), absl::StrCat("layer-host-", rank)));
        }
        rdma::device_path::DeviceTransport* device_transport = device.transport.get();
        rdma::testing::ConnectCounter counter(
            on_device ? static_cast<rdma::Transport&>(*device_transport) : *fabric);
        rdma::Transport& transport =
            on_device ? static_cast<rdma::Transport&>(*device_transport) : counter;
        StrategyOptions options = Options(params);
        options.codec = codec;
        ASSIGN_OR_RETURN(auto strategy, LayerSeparatedStrategy::Create(options));
        std::vector<Parameter> params = problem.MakeParameters();
        std::vector<at::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        ModelSplit split = ToyProblem::Split(p);
        split.features = [&p, features](const at::Tensor& x) { return features(p, x); };
        int t = 0;
        StrategyContext context{rank, world, &transport, &store};
        context.device = device_transport;
        context.batch_size = kBatch;
        context.split = &split;
        context.next_batch = problem.NextBatch(rank, &t);
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        job.conv_ranks[rank] = strategy->layout().conv_ranks;
        RETURN_IF_ERROR(strategy->Start());
        while (!strategy->done()) {
          ASSIGN_OR_RETURN(StepReport report, strategy->Step(nullptr));
          if (report.clock == 0) job.first_loss[rank] = report.compute.loss;
          job.max_staleness[rank] =
              std::max(job.max_staleness[rank], report.clock - report.min_clock);
          if (share_every > 0 && (report.clock + 1) % share_every == 0) {
            RETURN_IF_ERROR(strategy->ShareModel());
            std::vector<at::Tensor> now;
            for (const Parameter& param : params) now.push_back(param.tensor.detach().clone());
            job.shared[rank].push_back(std::move(now));
          }
        }
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& param : params) job.finals[rank].push_back(param.tensor.detach().clone());
        job.codec_calls[rank] = strategy->compression().calls;
        job.connected[rank] = counter.connected();
        job.links[rank] = strategy->link_stats();
        job.on_device[rank] = strategy->exchanges_on_device();
        job.activations_on_device[rank] = strategy->activations_on_device();
        job.copies[rank] = strategy->counters().copies;
        strategy.reset();  // before the transport and device it used
        return absl::OkStatus();
      });
  return job;
}

// One process on the job's conv ranks' batches concatenated; it trained.
std::vector<at::Tensor> ConvReference(const ToyProblem& problem, const Job& job) {
  std::vector<int> convs;
  for (int i = 0; i < job.conv_ranks[0]; ++i) convs.push_back(i);
  std::vector<at::Tensor> reference = problem.Reference(convs, kSteps, 0.1, 0.9);
  EXPECT_GT(ToyProblem::MaxDiff(reference, problem.init), 1e-3);
  return reference;
}

void ExpectMatchesReference(const ToyProblem& problem, const Job& job, int world) {
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  const int conv = job.conv_ranks[0];
  const std::vector<at::Tensor> reference = ConvReference(problem, job);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(job.conv_ranks[r], conv);
    EXPECT_LT(ToyProblem::MaxDiff(job.finals[r], reference), 1e-5) << "rank " << r;
    // The communicator, the ring over everyone and the group's all-reduce
    // share the links: every endpoint is theirs, at most a data lane and
    // a control lane per peer (a ring's neighbours: credits to the left
    // one, flags to the right one), and one watch per peer.
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

// Device parameters (fake devices): both groups and the final exchange on
// device regions, the activations and their gradients in device slots,
// sent out of a device send arena uncopied (the labels and the loss, from
// host memory, are the communicator's only copies), the same parameters as
// one process on the conv ranks' batches, with the model shared mid-run
// through the device region too and with K chosen by the cost model (its
// probe on the region); with activations=host, through host memory (the
// activations and their gradients copied too), the same parameters.
TEST(LayerSeparatedStrategyTest, DeviceParametersMatchOneProcess) {
  at::set_num_threads(1);
  for (const auto& params : std::vector<std::map<std::string, std::string>>{
           {{"fc_ranks", "1"}}, {}, {{"fc_ranks", "1"}, {"activations", "host"}}}) {
    const bool host = params.count("activations") > 0;
    SCOPED_TRACE(params.empty() ? "K chosen" : host ? "activations=host" : "fc_ranks=1");
    const ToyProblem problem(3, kSteps, kBatch);
    const Job job = RunJob(problem, 3, params, "", &ToyProblem::Features, /*share_every=*/2,
                           /*on_device=*/true);
    for (const absl::Status& status : job.status) ASSERT_OK(status);
    const std::vector<at::Tensor> reference = ConvReference(problem, job);
    const int convs = job.conv_ranks[0];
    for (int r = 0; r < 3; ++r) {
      EXPECT_LT(ToyProblem::MaxDiff(job.finals[r], reference), 1e-5) << "rank " << r;
      EXPECT_EQ(job.on_device[r], 1) << "rank " << r;
      EXPECT_EQ(job.activations_on_device[r], host ? 0 : 1) << "rank " << r;
      // A conv rank sends labels (and its activations) each step; an FC
      // rank a loss (and the activations' gradients) per conv rank served.
      const int64_t per_step = (host ? 2 : 1) * (r < convs ? 1 : convs);
      EXPECT_EQ(job.copies[r], per_step * kSteps) << "rank " << r;
      ASSERT_EQ(job.shared[r].size(), 2u) << "rank " << r;
    }
    // After each mid-run share every rank holds the same whole model.
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(ToyProblem::MaxDiff(job.shared[1][k], job.shared[0][k]), 0.0) << k;
      EXPECT_EQ(ToyProblem::MaxDiff(job.shared[2][k], job.shared[0][k]), 0.0) << k;
    }
  }
}

// Features whose backward reads the weights (w1 is used again on the
// hidden activations), unlike ToyProblem::Features, whose backward needs
// only its input: with these a backward on updated weights and one on the
// forward's (stashed) weights differ.
at::Tensor DeepFeatures(const std::vector<at::Tensor>& p, const at::Tensor& x) {
  const at::Tensor h = ToyProblem::Features(p, x);                   // [B, 8]
  return at::relu(at::addmm(p[1], at::matmul(h, p[0]), p[0].t()));  // [B, 8]
}

// One process running overlap=on's schedule on the conv ranks' batches
// concatenated: batch t+1 is forwarded before the features' update of batch
// t, and batch t's backward runs on the features as they are when its
// gradients arrive (updated in place, as the group's flat storage is,
// without a new version for autograd) or, with `stash`, on the weights its
// forward used (PipeDream's weight stashing). The head trains on each batch
// in turn. SGD with momentum as DataParallelGroup::ApplySgd.
std::vector<at::Tensor> PipelinedReference(const ToyProblem& problem, int convs, int steps,
                                           double lr, double momentum,
                                           FeaturesFn features = &ToyProblem::Features,
                                           bool stash = false) {
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
  // A forward and the tensors its gradients land in (p's, or stashed copies).
  struct Forward {
    at::Tensor act;
    std::vector<at::Tensor> weights;
  };
  auto forward = [&](int t) {
    Forward f;
    f.weights = p;
    if (stash) {
      f.weights[0] = p[0].detach().clone().requires_grad_(true);
      f.weights[1] = p[1].detach().clone().requires_grad_(true);
    }
    f.act = features(f.weights, batch(t, false));
    return f;
  };
  auto update = [&](size_t i, const at::Tensor& grad) {
    at::Tensor value = p[i].data();  // the storage, outside autograd's versions
    velocity[i].mul_(momentum).add_(grad);
    value.add_(velocity[i], -lr);
  };
  Forward now = forward(0);
  for (int t = 0; t < steps; ++t) {
    Forward ahead = t + 1 < steps ? forward(t + 1) : Forward{};
    at::Tensor a = now.act.detach().requires_grad_(true);
    at::cross_entropy_loss(ToyProblem::Head(p, a), batch(t, true), {}, at::Reduction::None)
        .sum()
        .div(static_cast<double>(kBatch * convs))
        .backward();
    for (size_t i : {2, 3}) {
      update(i, p[i].grad());
      p[i].mutable_grad() = at::Tensor();
    }
    now.act.backward(a.grad());
    for (size_t i : {0, 1}) {
      update(i, now.weights[i].grad());
      now.weights[i].mutable_grad() = at::Tensor();
    }
    now = std::move(ahead);
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
    // The conv ranks report their features one step stale; the head never is.
    EXPECT_EQ(job.max_staleness[r], r < convs ? 1 : 0) << "rank " << r;
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

// The pipeline with the activations in device slots (fake devices): the
// FC rank's gradients for its three conv ranks out of one send arena, a
// conv rank's next activations written into its arena once the last went.
TEST(LayerSeparatedTest, OverlapOnDevicesRunsStanzasPipeline) {
  at::set_num_threads(1);
  const ToyProblem problem(4, kSteps, kBatch);
  const Job job = RunJob(problem, 4, {{"fc_ranks", "1"}, {"overlap", "on"}}, "",
                         &ToyProblem::Features, /*share_every=*/0, /*on_device=*/true);
  ExpectPipelined(problem, job, 4, 3);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(job.activations_on_device[r], 1) << "rank " << r;
}

// What docs/strategies.md says of the pipeline's backward: it multiplies by
// the weights as updated since the forward, not by stashed ones.
TEST(LayerSeparatedTest, OverlapBackPropagatesThroughTheUpdatedWeights) {
  at::set_num_threads(1);
  const ToyProblem problem(2, kSteps, kBatch);
  const Job job = RunJob(problem, 2, {{"fc_ranks", "1"}, {"overlap", "on"}}, "", &DeepFeatures);
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  const std::vector<at::Tensor> in_place =
      PipelinedReference(problem, 1, kSteps, 0.1, 0.9, &DeepFeatures, /*stash=*/false);
  const std::vector<at::Tensor> stashed =
      PipelinedReference(problem, 1, kSteps, 0.1, 0.9, &DeepFeatures, /*stash=*/true);
  EXPECT_GT(ToyProblem::MaxDiff(in_place, stashed), 1e-4);
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(ToyProblem::MaxDiff(job.finals[r], in_place), 1e-5) << "rank " << r;
  }
}

// ShareModel() mid-run (what rdmaflow_train --eval_every does): every rank
// then holds the whole model after that step, and training goes on as
// without the calls, with and without the pipeline.
TEST(LayerSeparatedTest, ShareModelGivesEveryRankTheWholeModelMidRun) {
  at::set_num_threads(1);
  constexpr int kEvery = 2, kWorld = 4, kConvs = 3;
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap=on" : "overlap=off");
    const ToyProblem problem(kWorld, kSteps, kBatch);
    const Job job = RunJob(problem, kWorld,
                           {{"fc_ranks", "1"}, {"overlap", overlap ? "on" : "off"}}, "",
                           &ToyProblem::Features, kEvery);
    if (overlap) {
      ExpectPipelined(problem, job, kWorld, kConvs);
    } else {
      ExpectMatchesReference(problem, job, kWorld);
    }
    std::vector<int> convs;
    for (int i = 0; i < kConvs; ++i) convs.push_back(i);
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_EQ(job.shared[r].size(), static_cast<size_t>(kSteps / kEvery)) << "rank " << r;
      for (size_t k = 0; k < job.shared[r].size(); ++k) {
        const int steps = kEvery * static_cast<int>(k + 1);
        const std::vector<at::Tensor> expected =
            overlap ? PipelinedReference(problem, kConvs, steps, 0.1, 0.9)
                    : problem.Reference(convs, steps, 0.1, 0.9);
        EXPECT_LT(ToyProblem::MaxDiff(job.shared[r][k], expected), 1e-5)
            << "rank " << r << " after step " << steps;
      }
    }
  }
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
