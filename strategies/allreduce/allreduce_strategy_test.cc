// The all-reduce strategy with its ranks as threads over loopback: W
// replicas end with exactly the parameters of one process training on their
// batches concatenated (SGD with momentum), whatever the bucket size, also
// with device parameters on the fake device; bad parameters are refused by
// name.
#include "ATen/Parallel.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/zeros.h"
#include "strategies/allreduce/allreduce_strategy.h"

#include <map>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "graph_analyzer/testing/small_traces.h"
#include "gtest/gtest.h"
#include "rdma/device/device_transport.h"
#include "rdma/device/testing/fake_device_rank.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;

StrategyOptions Options(int steps, std::map<std::string, std::string> params) {
  return testing::ToyOptions(steps, std::move(params));
}

// Mean loss of `params` over every worker's batches of every step.
double LossOverAllData(const ToyProblem& problem, const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  double total = 0;
  int batches = 0;
  for (size_t w = 0; w < problem.x.size(); ++w) {
    for (size_t s = 0; s < problem.x[w].size(); ++s) {
      total += ToyProblem::Loss(params, problem.x[w][s], problem.y[w][s]).item<double>();
      ++batches;
    }
  }
  return total / batches;
}

// A job's outcome on each rank.
struct JobRun {
  std::vector<std::vector<at::Tensor>> finals;
  std::vector<runtime::TransferCounters> counters;
  std::vector<compression::CompressionStats> compression;
};

// `world` replicas train `problem` for `steps` with `params` and `codec`.
JobRun Train(const ToyProblem& problem, int world, int steps,
          std::map<std::string, std::string> params, const std::string& codec) {
  JobRun run;
  run.finals.resize(world);
  run.counters.resize(world);
  run.compression.resize(world);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        StrategyOptions options = Options(steps, params);
        options.codec = codec;
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(options));
        std::vector<Parameter> parameters = problem.MakeParameters();
        RETURN_IF_ERROR(
            strategy->Prepare({rank, world, &transport, &store}, parameters).status());
        RETURN_IF_ERROR(strategy->Start());
        ComputeFn compute = problem.Compute(parameters, rank);
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(compute).status());
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& p : parameters) {
          run.finals[rank].push_back(p.tensor.detach().clone());
        }
        run.counters[rank] = strategy->counters();
        run.compression[rank] = strategy->compression();
        return absl::OkStatus();
      });
  for (const absl::Status& status : statuses) EXPECT_OK(status);
  return run;
}

class AllReduceEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(AllReduceEquivalenceTest, MatchesOneProcessOnTheConcatenatedBatches) {
  at::set_num_threads(1);
  const auto& [world, bucket] = GetParam();
  constexpr int kSteps = 6, kBatch = 8;
  const ToyProblem problem(world, kSteps, kBatch);
  const JobRun run =
      Train(problem, world, kSteps, {{"bucket_bytes", bucket}, {"chunk_bytes", "64"}}, "");
  if (HasFailure()) return;
  const auto& finals = run.finals;
  const auto& counters = run.counters;
  std::vector<int> everyone;
  for (int w = 0; w < world; ++w) everyone.push_back(w);
  const std::vector<at::Tensor> reference = problem.Reference(everyone, kSteps, 0.1, 0.9);
  EXPECT_GT(ToyProblem::MaxDiff(reference, problem.init), 1e-3);  // it trained
  for (int r = 0; r < world; ++r) {
    EXPECT_LT(ToyProblem::MaxDiff(finals[r], reference), 1e-5) << "rank " << r;
    EXPECT_EQ(counters[r].steps, kSteps);
    if (world > 1) {
      EXPECT_GT(counters[r].bytes_sent, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    RanksAndBuckets, AllReduceEquivalenceTest,
    ::testing::Values(std::make_tuple(1, "0"), std::make_tuple(2, "0"),
                      std::make_tuple(3, "64"), std::make_tuple(4, "1M")),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "ranks_bucket",
                          std::get<1>(info.param));
    });

// Device parameters (StrategyContext::device): each rank's transport wrapped
// in a DeviceTransport over a fake device of its own, each on a "host" of
// its own (the fake device's IPC opens only in another process, as CUDA's:
// tests/strategies_train_e2e_test runs the same-host device path, as
// processes). The parameters are the fake device's tensors (CPU tensors
// over its memory); the gradients lie in the group's device region; the
// replicas end as one process on the concatenated batches, as on the
// host, with the buckets pipelined (on the fake device, whose tensors the
// CPU writes, no bucket needs a device event first), and with
// overlap=forward, which runs the model's split on them as the trainer's
// --device gives it (w2, the head's later bucket, deferred to the next
// forward: whole, or `forward_cut` its last 64 of 96 bytes, a part of a
// bucket reduced in two calls).
class DeviceParametersTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceParametersTest, TrainAsOneProcessDoes) {
  at::set_num_threads(1);
  constexpr int kWorld = 2, kSteps = 4, kBatch = 8;
  const bool forward = GetParam() != "on";
  const ToyProblem problem(kWorld, kSteps, kBatch);
  std::vector<std::vector<at::Tensor>> finals(kWorld);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreadsOwning(
      kWorld,
      [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(rdma::device_path::testing::FakeDeviceRank device,
                         rdma::device_path::testing::WrapInFakeDevice(
                             std::move(host), absl::StrCat("toy-host-", rank)));
        device::FakeDevice* fake = device.device.get();
        std::unique_ptr<rdma::device_path::DeviceTransport>& transport = device.transport;
        std::map<std::string, std::string> params = {{"bucket_bytes", "64"}};
        if (forward) {
          params = {{"overlap", "forward"}, {"bucket_bytes", "4"}, {"chunk_bytes", "64"},
                    {"forward_bytes", GetParam() == "forward_cut" ? "64" : "1K"}};
        }
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(Options(kSteps, params)));
        std::vector<Parameter> parameters = problem.MakeParameters();
        std::vector<at::Tensor> tensors;
        for (const Parameter& p : parameters) tensors.push_back(p.tensor);
        const ModelSplit split = ToyProblem::Split(tensors);
        int t = 0;
        StrategyContext context{rank, kWorld, transport.get(), &store};
        context.device = transport.get();
        context.split = &split;
        context.next_batch = problem.NextBatch(rank, &t);
        RETURN_IF_ERROR(strategy->Prepare(context, parameters).status());
        RETURN_IF_ERROR(strategy->Start());
        EXPECT_TRUE(strategy->exchanges_on_device());
        EXPECT_EQ(strategy->deferred_buckets(), forward ? 1 : 0);
        if (!forward) EXPECT_TRUE(strategy->overlaps());
        for (const Parameter& p : parameters) {
          ASSIGN_OR_RETURN(const device::PointerInfo grad,
                           fake->Query(p.tensor.grad().data_ptr()));
          EXPECT_EQ(grad.kind, device::MemoryKind::kDevice) << p.name;
        }
        ComputeFn compute = forward ? nullptr : problem.Compute(parameters, rank);
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(compute).status());
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& p : parameters) finals[rank].push_back(p.tensor.detach().clone());
        strategy.reset();  // before the transport and the device it used
        return absl::OkStatus();
      });
  for (const absl::Status& status : statuses) ASSERT_OK(status);
  const std::vector<at::Tensor> reference = problem.Reference({0, 1}, kSteps, 0.1, 0.9);
  EXPECT_GT(ToyProblem::MaxDiff(reference, problem.init), 1e-3);  // it trained
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_LT(ToyProblem::MaxDiff(finals[r], reference), 1e-5) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Overlap, DeviceParametersTest,
                         ::testing::Values("on", "forward", "forward_cut"),
                         [](const auto& info) { return info.param; });

// Device parameters need a strategy that takes them (not the all-reduce
// with a codec, which encodes on the host) and the context's transport as
// the device; a parameter of another type is named.
TEST(AllReduceStrategyTest, DeviceParametersAreRefusedWhereTheyCannotGo) {
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreadsOwning(
      1, [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) -> absl::Status {
        rdma::Transport* plain = host.get();
        ASSIGN_OR_RETURN(rdma::device_path::testing::FakeDeviceRank device,
                         rdma::device_path::testing::WrapInFakeDevice(std::move(host), ""));
        std::unique_ptr<rdma::device_path::DeviceTransport>& transport = device.transport;
        std::vector<Parameter> params = {{"w", at::zeros({3})}};
        StrategyContext context{rank, 1, plain, &store};
        context.device = transport.get();
        ASSIGN_OR_RETURN(auto other, AllReduceStrategy::Create(Options(1, {})));
        EXPECT_THAT(other->Prepare(context, params).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             ::testing::HasSubstr("must be the context's transport")));
        context.transport = transport.get();
        StrategyOptions with_codec = Options(1, {});
        with_codec.codec = "topk:ratio=0.25";
        ASSIGN_OR_RETURN(auto coded, AllReduceStrategy::Create(with_codec));
        EXPECT_FALSE(coded->takes_device_parameters());
        EXPECT_THAT(coded->Prepare(context, params).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             ::testing::HasSubstr("exchanges host parameters only")));
        std::vector<Parameter> doubles = {{"d", at::zeros({3}, at::kDouble)}};
        ASSIGN_OR_RETURN(auto typed, AllReduceStrategy::Create(Options(1, {})));
        RETURN_IF_ERROR(typed->Prepare(context, doubles).status());
        EXPECT_THAT(typed->Start(),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             ::testing::HasSubstr("'d' is a Double tensor on cpu")));
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

// Each codec trains the toy problem to within 0.15 of the loss the dense
// all-reduce reaches in the same steps (and well below where it started),
// replicas stay identical, and fewer bytes cross.
TEST(AllReduceStrategyTest, EveryCodecTrainsTheToyProblemWithFewerBytes) {
  at::set_num_threads(1);
  constexpr int kWorld = 3, kSteps = 40, kBatch = 8;
  const ToyProblem problem(kWorld, kSteps, kBatch);
  const double initial = LossOverAllData(problem, problem.init);
  const JobRun dense = Train(problem, kWorld, kSteps, {}, "");
  const double dense_loss = LossOverAllData(problem, dense.finals[0]);
  ASSERT_LT(dense_loss, 0.8 * initial);
  for (const char* codec : {"topk:ratio=0.25", "topk:ratio=0.25,sampled=1", "randomk:ratio=0.25",
                            "int8:bucket=16", "sketch:rows=3,cols=16,k=16"}) {
    SCOPED_TRACE(codec);
    const JobRun run = Train(problem, kWorld, kSteps, {}, codec);
    if (run.finals[0].empty()) continue;  // failed: reported above
    const double loss = LossOverAllData(problem, run.finals[0]);
    EXPECT_LT(loss, dense_loss + 0.15) << "dense " << dense_loss << ", initial " << initial;
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(ToyProblem::MaxDiff(run.finals[r], run.finals[0]), 0.0) << "rank " << r;
    }
    EXPECT_LT(run.counters[0].bytes_sent, dense.counters[0].bytes_sent);
    EXPECT_EQ(run.compression[0].calls, kSteps);
    EXPECT_GT(run.compression[0].encode_time, absl::ZeroDuration());
  }
}

TEST(AllReduceStrategyTest, AFloat64ParameterIsRefusedByName) {
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(Options(1, {})));
        std::vector<Parameter> params = {{"w", at::zeros({3}, at::kDouble)}};
        RETURN_IF_ERROR(strategy->Prepare({rank, 2, &transport, &store}, params).status());
        return strategy->Start();
      });
  for (const absl::Status& s : status) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("'w'")));
  }
}

TEST(AllReduceStrategyTest, GradientsAreBucketedInTheOrderThePlanCompletesThem) {
  // fc1 -> relu -> fc2 as an importer traces it: backward completes fc2 first.
  const graph::GraphDef model = graph::testing::TrainingGraphOf(graph::testing::SmallMlpTrace());
  std::vector<Parameter> params = {{"fc1.weight", at::zeros({16, 20})},
                                   {"fc1.bias", at::zeros({16})},
                                   {"fc2.weight", at::zeros({4, 16})},
                                   {"fc2.bias", at::zeros({4})}};
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        StrategyContext context{rank, 1, &transport, &store};
        ASSIGN_OR_RETURN(auto planned, AllReduceStrategy::Create(Options(1, {})));
        ASSIGN_OR_RETURN(auto plain, AllReduceStrategy::Create(Options(1, {})));
        RETURN_IF_ERROR(plain->Prepare(context, params).status());
        // Without the plan, the parameters reversed (DDP's guess).
        EXPECT_EQ(plain->gradient_order(),
                  (std::vector<std::string>{"fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}));
        context.model = &model;
        // A parameter backward never reaches (not in the plan's gradients)
        // comes last.
        std::vector<Parameter> with_unused = params;
        with_unused.insert(with_unused.begin(), {"unused", at::zeros({7})});
        RETURN_IF_ERROR(planned->Prepare(context, with_unused).status());
        EXPECT_EQ(planned->gradient_order(),
                  (std::vector<std::string>{"fc2.weight", "fc2.bias", "fc1.weight", "fc1.bias",
                                            "unused"}));
        // A parameter whose size differs from its gradient's in the plan.
        std::vector<Parameter> resized = params;
        resized[3].tensor = at::zeros({5});
        ASSIGN_OR_RETURN(auto mismatched, AllReduceStrategy::Create(Options(1, {})));
        EXPECT_THAT(mismatched->Prepare(context, resized).status(),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             ::testing::HasSubstr("'fc2.bias' has 5 elements")));
        return absl::OkStatus();
      });
  EXPECT_OK(status[0]);
}

TEST(AllReduceStrategyTest, BadParametersAreNamed) {
  EXPECT_THAT(AllReduceStrategy::Create(Options(1, {{"bucket", "1"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("known: bucket_bytes, chunk_bytes, slots")));
  EXPECT_THAT(AllReduceStrategy::Create(Options(1, {{"chunk_bytes", "8"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr(">= 64")));
  EXPECT_THAT(AllReduceStrategy::Create(Options(0, {})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::strategies
