// The parameter server, with its ranks as threads over the loopback fabric:
//   - bsp gives exactly the parameters of one process training on the
//     workers' batches concatenated (SGD with momentum), over every
//     communicator and both pull paths;
//   - ssp and dssp never let a worker run past the staleness bound (the
//     clocks the server recorded, and the ones each worker saw), with one
//     worker slowed down and random compute times;
//   - asp lets a worker finish while another is stalled;
//   - all of it also with overlap=on (shards cut into slices pushed during
//     backward and pulled each as soon as it may be), where every pull of a
//     slice is checked against the mode's bound as well; under bsp every
//     slice of the next step pulled during the step before (prefetch), and
//     none with prefetch=off.
#include "ATen/Parallel.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/zeros.h"
#include "strategies/ps/ps_strategy.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "graph_analyzer/placement.h"
#include "graph_analyzer/testing/small_traces.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/device/device_transport.h"
#include "rdma/device/testing/fake_device_rank.h"
#include "rdma/testing/connect_counter.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::ps {
namespace {

using ::rdmaflow::testing::StatusIs;

using Problem = ::rdmaflow::strategies::testing::ToyProblem;

StrategyOptions Options(int steps, const std::string& communicator,
                        std::map<std::string, std::string> params) {
  StrategyOptions options;
  options.steps = steps;
  options.learning_rate = 0.1;
  options.momentum = 0.9;
  options.communicator = communicator;
  options.communicator_options.timeout = absl::Seconds(60);
  options.params = std::move(params);
  return options;
}

// Runs a ps job of `servers` + `workers` ranks as threads; `delay(w, t)`
// is worker w's extra compute time at step t. Collects the workers' final
// parameters, every worker's step reports and the servers' clock histories.
struct JobResult {
  std::vector<absl::Status> status;
  std::vector<std::vector<at::Tensor>> final_params;  // by worker
  std::vector<std::vector<StepReport>> reports;          // by worker
  std::vector<std::vector<std::vector<int64_t>>> history;  // by server
  std::vector<onesided::PeerLinksStats> links;             // by rank
  std::vector<int64_t> connected;  // endpoints the rank's transport connected
  std::vector<std::vector<PsStrategy::PullRecord>> pulls;  // by worker
  std::vector<int64_t> overlapped;  // by worker: pushes begun during compute
  std::vector<int64_t> prefetched;  // by worker: slices pulled in the step before
  int64_t slices = 0;               // over every server's shard
};

// overlap=on with slices of 16 floats: the toy's shards (67 floats in all)
// are cut into several slices, some splitting a parameter.
std::map<std::string, std::string> WithOverlap(std::map<std::string, std::string> params,
                                               bool overlap) {
  if (overlap) {
    params["overlap"] = "on";
    params["slice_bytes"] = "64";
  }
  return params;
}

// `after_backward(w, strategy)` runs in worker w's compute after its
// backward. With `on_device`, each rank's transport is a DeviceTransport
// over a fake device of its own, on a "host" of its own (the fake device's
// IPC opens only in another process, as CUDA's), and the parameters are
// device parameters (StrategyContext::device); its connections are not
// counted.
JobResult RunJob(const Problem& problem, int servers, int workers,
                 const StrategyOptions& options,
                 const std::function<void(int, int64_t)>& before_compute,
                 const std::function<absl::Status(int, const PsStrategy&)>& after_backward =
                     nullptr,
                 bool on_device = false) {
  JobResult result;
  result.pulls.resize(workers);
  result.overlapped.resize(workers);
  result.prefetched.resize(workers);
  result.final_params.resize(workers);
  result.reports.resize(workers);
  result.history.resize(servers);
  result.links.resize(servers + workers);
  result.connected.resize(servers + workers);
  result.status = rdma::testing::RunRankThreadsOwning(
      servers + workers,
      [&](int rank, std::unique_ptr<rdma::Transport>& fabric,
          rdma::Store& store) -> absl::Status {
        rdma::device_path::testing::FakeDeviceRank on;
        if (on_device) {
          ASSIGN_OR_RETURN(on, rdma::device_path::testing::WrapInFakeDevice(
                                   std::move(fabric), absl::StrCat("ps-host-", rank)));
        }
        rdma::device_path::DeviceTransport* device = on.transport.get();
        rdma::testing::ConnectCounter counting(on_device ? *device : *fabric);
        rdma::Transport& transport =
            on_device ? static_cast<rdma::Transport&>(*device) : counting;
        ASSIGN_OR_RETURN(auto strategy, PsStrategy::Create(options));  // goes first
        std::vector<Parameter> params = problem.MakeParameters();
        StrategyContext context{rank, servers + workers, &transport, &store};
        context.device = device;
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        RETURN_IF_ERROR(strategy->Start());
        EXPECT_EQ(strategy->exchanges_on_device(), on_device);
        strategy->record_pulls(true);
        const int w = rank - servers;
        int64_t t = 0;
        ComputeFn compute = [&]() -> absl::StatusOr<ComputeResult> {
          if (before_compute) before_compute(w, t);
          std::vector<at::Tensor> p;
          for (const Parameter& param : params) p.push_back(param.tensor);
          at::Tensor loss = Problem::Loss(p, problem.x[w][t], problem.y[w][t]);
          loss.backward();
          if (after_backward) RETURN_IF_ERROR(after_backward(w, *strategy));
          ++t;
          return ComputeResult{loss.item<double>(), 0, problem.x[w][t].size(0)};
        };
        while (!strategy->done()) {
          ASSIGN_OR_RETURN(StepReport report,
                           strategy->Step(strategy->computes() ? compute : nullptr));
          if (strategy->computes()) result.reports[w].push_back(report);
        }
        RETURN_IF_ERROR(strategy->Finish());
        result.links[rank] = strategy->link_stats();
        result.connected[rank] = counting.connected();
        if (strategy->computes()) {
          for (const Parameter& param : params) {
            result.final_params[w].push_back(param.tensor.detach().clone());
          }
          result.pulls[w] = strategy->pulls();
          if (w == 0) {
            for (const auto& server : strategy->slices()) result.slices += server.size();
          }
          result.overlapped[w] = strategy->overlapped_pushes();
          result.prefetched[w] = strategy->prefetched_pulls();
        } else {
          result.history[rank] = strategy->clock_history();
        }
        return absl::OkStatus();
      });
  return result;
}

class BspTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(BspTest, MatchesOneProcessTrainingOnTheConcatenatedBatches) {
  at::set_num_threads(1);
  const auto& [communicator, how] = GetParam();
  // read_overlap prefetches the next step's slices (the default), and
  // read_overlap_late pulls them when the step begins (prefetch=off).
  const bool overlap = absl::StartsWith(how, "read_overlap");
  const bool prefetch = how == "read_overlap";
  const std::string pull = overlap ? "read" : how;
  constexpr int kWorkers = 2, kSteps = 6, kBatch = 16;
  const Problem problem(kWorkers, kSteps, kBatch);
  std::map<std::string, std::string> params =
      WithOverlap({{"servers", "2"}, {"sync", "bsp"}, {"pull", pull}}, overlap);
  if (overlap && !prefetch) params["prefetch"] = "off";
  std::vector<int64_t> computed(kWorkers, 0);  // by worker, written by its own thread
  JobResult job = RunJob(
      problem, 2, kWorkers, Options(kSteps, communicator, params), nullptr,
      [&](int w, const PsStrategy& strategy) -> absl::Status {
        const int64_t step = computed[w]++;
        if (!overlap) return absl::OkStatus();
        // Backward has completed every slice: the first push is on its way
        // before compute returns, or never (pushes that waited for compute)
        // and this times out.
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (strategy.pushes_begun() < 1) {
          if (absl::Now() > deadline) {
            return absl::DeadlineExceededError("no push began during compute");
          }
          std::this_thread::yield();
        }
        // With prefetch, every slice of the next step is pulled while this
        // compute still runs (the other worker's pushes go on its
        // communication thread whatever its compute does), or this times
        // out: a worker that pulled only when the next step began.
        if (!prefetch || step + 1 >= kSteps) return absl::OkStatus();
        int64_t slices = 0;
        for (const auto& server : strategy.slices()) slices += server.size();
        while (strategy.prefetched_pulls() < (step + 1) * slices) {
          if (absl::Now() > deadline) {
            return absl::DeadlineExceededError(absl::StrCat(
                "step ", step, ": ", strategy.prefetched_pulls(), " slices prefetched, ",
                (step + 1) * slices, " expected during compute"));
          }
          std::this_thread::yield();
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  for (int w = 0; w < kWorkers; ++w) {
    // Every slice of every step pulled once it held the step's updates
    // (under bsp a server applies a slice's step once every worker's slice
    // of it is in: the fewest any worker pushed), and no later ones.
    for (const PsStrategy::PullRecord& pull : job.pulls[w]) {
      ASSERT_EQ(*std::min_element(pull.held.begin(), pull.held.end()), pull.clock)
          << "worker " << w << " server " << pull.server << " slice " << pull.slice;
    }
    // Every slice once a step (pull=send receives them instead).
    EXPECT_EQ(job.pulls[w].size(), pull == "read" ? size_t(kSteps * job.slices) : 0)
        << "worker " << w;
    if (overlap) {
      EXPECT_GE(job.slices, 4) << "the shards were not sliced";
      EXPECT_GE(job.overlapped[w], kSteps) << "worker " << w;
    } else {
      EXPECT_EQ(job.overlapped[w], 0);
    }
    // With prefetch every step after the first was pulled during the step
    // before it (the last step's parameters are Finish()'s), and the
    // records say so; without it none.
    const int64_t early = std::count_if(job.pulls[w].begin(), job.pulls[w].end(),
                                        [](const PsStrategy::PullRecord& p) { return p.prefetched; });
    EXPECT_EQ(early, prefetch ? (kSteps - 1) * job.slices : 0) << "worker " << w;
    EXPECT_EQ(job.prefetched[w], early) << "worker " << w;
  }

  // One endpoint and one watch per peer, shared by the communicator and
  // the versioned readers (pull=read reads params and clocks from each
  // server): a worker's peers are the servers, a server's the workers. No
  // protocol connects beside the links. The gRPC communicator connects
  // nothing over the transport. With overlap a worker reads over a second
  // lane to each server (its control lane), so that its pulls do not queue
  // behind its pushes.
  for (int rank = 0; rank < 2 + kWorkers; ++rank) {
    const int64_t peers = communicator == "grpc" ? 0 : 2;
    const int64_t lanes = overlap && rank >= 2 ? 2 * peers : peers;
    EXPECT_EQ(job.connected[rank], lanes) << "rank " << rank;
    EXPECT_EQ(job.links[rank].endpoints, lanes) << "rank " << rank;
    EXPECT_EQ(job.links[rank].watches, peers) << "rank " << rank;
  }

  // The reference: one process, the batches of a step concatenated.
  const std::vector<at::Tensor> reference = problem.Reference({0, 1}, kSteps, 0.1, 0.9);
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(job.final_params[w].size(), reference.size());
    for (size_t i = 0; i < reference.size(); ++i) {
      const double diff =
          (job.final_params[w][i] - reference[i].detach()).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << "worker " << w << " parameter " << i;
      // And training moved it: the test is not comparing two initial states.
      EXPECT_GT((reference[i].detach() - problem.init[i]).abs().max().item<double>(),
                1e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    CommunicatorsAndPulls, BspTest,
    ::testing::Values(std::make_tuple("rdma", "read"),
                      std::make_tuple("rdma", "send"),
                      std::make_tuple("rdma", "read_overlap"),
                      std::make_tuple("rdma", "read_overlap_late"),
                      std::make_tuple("rdma_copy", "send"),
                      std::make_tuple("grpc", "send")),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

// Device parameters (fake devices, each rank on a "host" of its own, so the
// pulls of the servers' device copies and the pushes into their device
// slots go the staged way): under bsp the workers end with one process's
// parameters, as on the host, with and without overlap; pull=send and a
// codec, which stage through host memory, take no device parameters.
TEST(PsStrategyTest, DeviceParametersMatchOneProcessTraining) {
  at::set_num_threads(1);
  constexpr int kWorkers = 2, kSteps = 5, kBatch = 16;
  const Problem problem(kWorkers, kSteps, kBatch);
  const std::vector<at::Tensor> reference = problem.Reference({0, 1}, kSteps, 0.1, 0.9);
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap=on" : "overlap=off");
    JobResult job = RunJob(problem, 2, kWorkers,
                           Options(kSteps, "rdma",
                                   WithOverlap({{"servers", "2"}, {"sync", "bsp"}}, overlap)),
                           nullptr,
                           [&](int, const PsStrategy& strategy) -> absl::Status {
                             // With overlap the first push goes before
                             // compute returns (or this times out).
                             const absl::Time deadline = absl::Now() + absl::Seconds(30);
                             while (overlap && strategy.pushes_begun() < 1) {
                               if (absl::Now() > deadline) {
                                 return absl::DeadlineExceededError("no push during compute");
                               }
                               std::this_thread::yield();
                             }
                             return absl::OkStatus();
                           },
                           /*on_device=*/true);
    for (const absl::Status& status : job.status) ASSERT_OK(status);
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_EQ(job.final_params[w].size(), reference.size());
      for (size_t i = 0; i < reference.size(); ++i) {
        EXPECT_LT((job.final_params[w][i] - reference[i].detach()).abs().max().item<double>(),
                  1e-5)
            << "worker " << w << " parameter " << i;
      }
      EXPECT_EQ(job.pulls[w].size(), static_cast<size_t>(kSteps * job.slices));
      if (overlap) EXPECT_GE(job.overlapped[w], kSteps) << "worker " << w;
    }
  }
  EXPECT_GT((reference[0].detach() - problem.init[0]).abs().max().item<double>(), 1e-3);
  ASSERT_OK_AND_ASSIGN(auto send, PsStrategy::Create(Options(1, "rdma", {{"pull", "send"}})));
  EXPECT_FALSE(send->takes_device_parameters());
  StrategyOptions coded = Options(1, "rdma", {});
  coded.codec = "topk:ratio=0.25";
  ASSERT_OK_AND_ASSIGN(auto with_codec, PsStrategy::Create(coded));
  EXPECT_FALSE(with_codec->takes_device_parameters());
  ASSERT_OK_AND_ASSIGN(auto read, PsStrategy::Create(Options(1, "rdma", {})));
  EXPECT_TRUE(read->takes_device_parameters());
}

// With a codec that keeps every element (topk:ratio=1) the compressed push
// gives the uncompressed result; with one that sends a quarter, the
// workers still train and push fewer bytes than their gradients hold.
TEST(PsStrategyTest, WorkersPushThroughATopKCodec) {
  at::set_num_threads(1);
  constexpr int kWorkers = 2, kSteps = 6, kBatch = 16;
  const Problem problem(kWorkers, kSteps, kBatch);
  StrategyOptions everything = Options(kSteps, "rdma", {{"servers", "2"}, {"sync", "bsp"}});
  everything.codec = "topk:ratio=1";
  JobResult job = RunJob(problem, 2, kWorkers, everything, nullptr);
  for (const absl::Status& status : job.status) EXPECT_OK(status);
  if (HasFailure()) return;
  const std::vector<at::Tensor> reference = problem.Reference({0, 1}, kSteps, 0.1, 0.9);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_LT(Problem::MaxDiff(job.final_params[w], reference), 1e-5) << "worker " << w;
  }
  StrategyOptions quarter = Options(kSteps, "rdma", {{"servers", "1"}, {"sync", "asp"}});
  quarter.codec = "topk:ratio=0.25,sampled=1";
  JobResult sparse = RunJob(problem, 1, kWorkers, quarter, nullptr);
  for (const absl::Status& status : sparse.status) EXPECT_OK(status);
  if (HasFailure()) return;
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_GT(Problem::MaxDiff(sparse.final_params[w], problem.init), 1e-3) << "worker " << w;
  }
}

TEST(PsStrategyTest, ACodecThatNeedsTheWholeGroupIsRefused) {
  StrategyOptions options = Options(2, "rdma", {});
  options.codec = "int8";
  EXPECT_THAT(PsStrategy::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("needs a collective among the members")));
  options.codec = "topk:ratio=0.01";
  EXPECT_OK(PsStrategy::Create(options).status());
}

// Property: whatever the compute times, no worker starts a clock more than
// the bound ahead of the slowest. Worker 0 is 4x slower than the others,
// and every compute time is random. With room (a bound above 0), worker 0
// also holds each step until the others have started min(bound, 2) steps
// further (or 5 s passed): they then use that room whatever the machine's
// scheduling, which the random times alone did not make sure of.
// With overlap=on, each pull of a slice also held the worker's own
// gradients of every step before, and every worker's down to the bound.
class StalenessTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(StalenessTest, NoWorkerEverExceedsTheStalenessBound) {
  at::set_num_threads(1);
  const auto& [sync, overlap] = GetParam();
  ASSERT_OK_AND_ASSIGN(SyncPolicy policy, SyncPolicy::Parse(sync));
  const int bound = policy.mode == SyncMode::kDssp ? policy.staleness_high
                                                   : policy.staleness;
  constexpr int kWorkers = 3, kSteps = 25;
  const Problem problem(kWorkers, kSteps, 4);
  std::vector<std::mt19937> random;
  for (int w = 0; w < kWorkers; ++w) random.emplace_back(100 + w);
  // The room every worker always has (dssp's low bound; it may get more).
  const int64_t lead = std::min(policy.staleness, 2);
  absl::Mutex mu;
  std::vector<int64_t> started(kWorkers, -1);  // the step each worker computes
  auto delay = [&](int w, int64_t step) {
    {
      absl::MutexLock lock(&mu);
      started[w] = step;
    }
    std::uniform_int_distribution<int> micros(0, 600);
    const int us = micros(random[w]) * (w == 0 ? 4 : 1);
    std::this_thread::sleep_for(std::chrono::microseconds(us));  // compute
    if (w != 0 || lead == 0 || step + lead >= kSteps) return;
    std::pair<std::vector<int64_t>*, int64_t> ahead(&started, step + lead);
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(
                            +[](std::pair<std::vector<int64_t>*, int64_t>* arg) {
                              for (size_t v = 1; v < arg->first->size(); ++v) {
                                if ((*arg->first)[v] < arg->second) return false;
                              }
                              return true;
                            },
                            &ahead),
                        absl::Seconds(5));
  };
  JobResult job = RunJob(problem, 1, kWorkers,
                         Options(kSteps, "rdma", WithOverlap({{"sync", sync}}, overlap)), delay);
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_FALSE(job.pulls[w].empty());
    for (const PsStrategy::PullRecord& pull : job.pulls[w]) {
      SCOPED_TRACE(absl::StrCat("worker ", w, " pulling slice ", pull.slice, " for clock ",
                                pull.clock, ": [", absl::StrJoin(pull.held, ", "), "]"));
      ASSERT_GE(pull.held[w], pull.clock);  // read-my-writes
      ASSERT_LE(pull.clock - *std::min_element(pull.held.begin(), pull.held.end()), bound);
      if (policy.mode == SyncMode::kBsp) {  // exactly the step's updates
        ASSERT_EQ(*std::min_element(pull.held.begin(), pull.held.end()), pull.clock);
      }
    }
  }
  int64_t widest = 0;
  for (const std::vector<int64_t>& clocks : job.history[0]) {
    const auto [lo, hi] = std::minmax_element(clocks.begin(), clocks.end());
    ASSERT_LE(*hi - *lo, bound + 1);  // pushed at most bound + 1 ahead
    widest = std::max(widest, *hi - *lo);
  }
  EXPECT_EQ(job.history[0].size(), size_t{kWorkers * kSteps});
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(job.reports[w].size(), size_t{kSteps});
    for (const StepReport& report : job.reports[w]) {
      ASSERT_LE(report.clock - report.min_clock, bound)
          << "worker " << w << " started clock " << report.clock
          << " with the slowest at " << report.min_clock;
    }
  }
  // The slow worker made the others use the room they had.
  if (bound > 0) {
    EXPECT_GE(widest, lead);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StalenessTest,
                         ::testing::Combine(::testing::Values("bsp", "ssp:1", "ssp:3",
                                                              "dssp:1:4"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name + (std::get<1>(info.param) ? "_overlap" : "");
                         });

class AspTest : public ::testing::TestWithParam<bool> {};

TEST_P(AspTest, AWorkerFinishesWhileAnotherIsStalled) {
  at::set_num_threads(1);
  constexpr int kSteps = 20;
  const Problem problem(2, kSteps, 4);
  absl::Notification worker0_done;
  int64_t worker1_clock_at_release = -1;
  auto stall = [&](int w, int64_t t) {
    if (w == 1 && t == 1) {
      // Worker 1 stalls in its second step until worker 0 has finished.
      worker0_done.WaitForNotification();
      worker1_clock_at_release = t;
    }
    if (w == 0 && t == kSteps - 1) worker0_done.Notify();
  };
  JobResult job =
      RunJob(problem, 1, 2, Options(kSteps, "rdma", WithOverlap({{"sync", "asp"}}, GetParam())),
             stall);
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  EXPECT_EQ(worker1_clock_at_release, 1);
  // Worker 0 ran all its steps while worker 1 sat at clock 1.
  ASSERT_EQ(job.reports[0].size(), size_t{kSteps});
  EXPECT_EQ(job.reports[0].back().min_clock, 1);
}

INSTANTIATE_TEST_SUITE_P(Overlap, AspTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "overlap" : "plain"; });

// prefetch=on under the asynchronous modes: every slice of the next step
// is pulled while this step's compute still runs (each worker waits in its
// compute until it has, or times out: a worker that pulled only when the
// next step began), and every such pull held the worker's own gradients of
// this step and came within the bound.
class AsyncPrefetchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AsyncPrefetchTest, PullsTheNextStepDuringComputeWithinTheBound) {
  at::set_num_threads(1);
  ASSERT_OK_AND_ASSIGN(SyncPolicy policy, SyncPolicy::Parse(GetParam()));
  const int bound = policy.mode == SyncMode::kDssp ? policy.staleness_high : policy.staleness;
  constexpr int kWorkers = 2, kSteps = 6;
  const Problem problem(kWorkers, kSteps, 4);
  std::map<std::string, std::string> params =
      WithOverlap({{"sync", GetParam()}, {"prefetch", "on"}}, true);
  std::vector<int64_t> computed(kWorkers, 0);  // by worker, written by its own thread
  // Worker 0 computes 5 ms a step, worker 1 at once: worker 1 runs at its
  // bound, where a prefetch that ignored the bound would exceed it.
  auto slow_first = [](int w, int64_t) {
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // compute
  };
  JobResult job = RunJob(
      problem, 1, kWorkers, Options(kSteps, "rdma", params), slow_first,
      [&](int w, const PsStrategy& strategy) -> absl::Status {
        const int64_t step = computed[w]++;
        if (step + 1 >= kSteps) return absl::OkStatus();
        int64_t slices = 0;
        for (const auto& server : strategy.slices()) slices += server.size();
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (strategy.prefetched_pulls() < (step + 1) * slices) {
          if (absl::Now() > deadline) {
            return absl::DeadlineExceededError(absl::StrCat(
                "worker ", w, " step ", step, ": ", strategy.prefetched_pulls(),
                " slices prefetched, ", (step + 1) * slices, " expected during compute"));
          }
          std::this_thread::yield();
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : job.status) ASSERT_OK(status);
  for (int w = 0; w < kWorkers; ++w) {
    int64_t early = 0;
    for (const PsStrategy::PullRecord& pull : job.pulls[w]) {
      SCOPED_TRACE(absl::StrCat("worker ", w, " pulling slice ", pull.slice, " for clock ",
                                pull.clock, pull.prefetched ? " (prefetched)" : "", ": [",
                                absl::StrJoin(pull.held, ", "), "]"));
      ASSERT_GE(pull.held[w], pull.clock);  // read-my-writes
      if (policy.mode != SyncMode::kAsp) {
        ASSERT_LE(pull.clock - *std::min_element(pull.held.begin(), pull.held.end()), bound);
      }
      early += pull.prefetched ? 1 : 0;
    }
    EXPECT_EQ(early, (kSteps - 1) * job.slices) << "worker " << w;
    EXPECT_EQ(job.prefetched[w], early) << "worker " << w;
    ASSERT_EQ(job.reports[w].size(), size_t{kSteps});
    for (const StepReport& report : job.reports[w]) {
      if (policy.mode == SyncMode::kAsp) continue;
      ASSERT_LE(report.clock - report.min_clock, bound) << "worker " << w;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AsyncPrefetchTest,
                         ::testing::Values("asp", "ssp:1", "dssp:1:3"), [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

TEST(PsStrategyTest, OverlapRefusesWhatCannotBeSliced) {
  EXPECT_THAT(PsStrategy::Create(Options(2, "rdma", {{"overlap", "on"}, {"pull", "send"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("pull=read")));
  StrategyOptions coded = Options(2, "rdma", {{"overlap", "on"}});
  coded.codec = "topk:ratio=0.01";
  EXPECT_THAT(PsStrategy::Create(coded).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("one or the other")));
  // 4-byte slices of a 1-million-element shard: a million transfers.
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& t, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, PsStrategy::Create(Options(
                                            2, "rdma", {{"overlap", "on"}, {"slice_bytes", "4"}})));
        EXPECT_THAT(strategy->Prepare({0, 2, &t, &store}, {{"p", at::zeros({1 << 20})}}).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             ::testing::HasSubstr("use larger slices")));
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
  for (const char* bad : {"0", "6", "-4", "1k"}) {
    EXPECT_THAT(PsStrategy::Create(Options(2, "rdma", {{"overlap", "on"}, {"slice_bytes", bad}}))
                    .status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::HasSubstr("auto or a positive multiple of 4")))
        << bad;
  }
}

TEST(PsStrategyTest, PrefetchIsRefusedWhereItHasNoMeaning) {
  for (const auto& params : std::vector<std::map<std::string, std::string>>{
           {{"prefetch", "on"}},
           {{"prefetch", "off"}, {"overlap", "off"}},
           {{"prefetch", "on"}, {"overlap", "off"}, {"sync", "asp"}}}) {
    EXPECT_THAT(PsStrategy::Create(Options(2, "rdma", params)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::HasSubstr("this job has overlap=off")))
        << absl::StrJoin(params, ",", absl::PairFormatter("="));
  }
  for (const char* sync : {"asp", "ssp:2", "dssp:1:3"}) {
    for (const char* value : {"on", "off"}) {
      EXPECT_OK(PsStrategy::Create(Options(2, "rdma",
                                           {{"overlap", "on"}, {"sync", sync}, {"prefetch", value}}))
                    .status())
          << sync << " prefetch=" << value;
    }
  }
  EXPECT_THAT(PsStrategy::Create(Options(2, "rdma", {{"overlap", "on"}, {"prefetch", "yes"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("prefetch must be 'on' or 'off'")));
  for (const char* value : {"on", "off"}) {
    EXPECT_OK(PsStrategy::Create(Options(2, "rdma", {{"overlap", "on"}, {"prefetch", value}}))
                  .status());
  }
}

TEST(PsStrategyTest, RejectsJobsWithoutWorkers) {
  ASSERT_OK_AND_ASSIGN(auto strategy,
                       PsStrategy::Create(Options(5, "rdma", {{"servers", "2"}})));
  at::Tensor p = at::zeros({4});
  rdma::Transport* transport = nullptr;
  EXPECT_THAT(strategy->Prepare({0, 2, transport, nullptr}, {{"p", p}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& t, rdma::Store& store) -> absl::Status {
        EXPECT_THAT(strategy->Prepare({0, 2, &t, &store}, {{"p", p}}).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             ::testing::HasSubstr("needs at least 3 ranks")));
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

// The plan a trainer reports is the one the communicator runs: planned
// once, with the strategy's options (free-running transfers never share
// slot memory), where the trainer used to plan the declared graph again
// with the default options (slots may share).
TEST(PsStrategyTest, ReportsThePlanItRuns) {
  at::Tensor p = at::zeros({1000});
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& t, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy,
                         PsStrategy::Create(Options(5, "rdma", {{"servers", "1"}})));
        RETURN_IF_ERROR(strategy->Prepare({0, 3, &t, &store}, {{"p", p}}).status());
        const plan::TransferPlan& plan = strategy->plan();
        EXPECT_FALSE(plan.config().share_slots());
        EXPECT_EQ(plan.link_size(), 2);  // a push link per worker (pulls are reads)
        for (const plan::LinkRegion& link : plan.link()) {
          EXPECT_EQ(link.slot_size(), 1);
          EXPECT_GE(link.slot(0).bytes(), 1000 * sizeof(float));
        }
        EXPECT_GT(plan.rank(0).registered_bytes(), 0u);
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

// slice_bytes left out, or auto, cuts a 600 KiB shard into 256 KiB slices
// (three pushes a worker: three slots on its link, the first of 256 KiB);
// a size given is kept.
TEST(PsStrategyTest, AutoSlicesAre256KiB) {
  at::Tensor p = at::zeros({600 * 1024 / 4});
  for (const auto& [given, slots, first] : std::vector<std::tuple<std::string, int, size_t>>{
           {"", 3, 262144}, {"auto", 3, 262144}, {"1048576", 1, 614400},
           {"204800", 3, 204800}, {"65536", 10, 65536}}) {
    std::map<std::string, std::string> params = {{"servers", "1"}, {"overlap", "on"}};
    if (!given.empty()) params["slice_bytes"] = given;
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        1, [&](int, rdma::Transport& t, rdma::Store& store) -> absl::Status {
          ASSIGN_OR_RETURN(auto strategy, PsStrategy::Create(Options(5, "rdma", params)));
          RETURN_IF_ERROR(strategy->Prepare({0, 3, &t, &store}, {{"p", p}}).status());
          const plan::TransferPlan& plan = strategy->plan();
          EXPECT_EQ(plan.link_size(), 2);
          for (const plan::LinkRegion& link : plan.link()) {
            EXPECT_EQ(link.slot_size(), slots) << "slice_bytes=" << given;
            // The largest slot holds a whole slice (the last may be shorter).
            size_t largest = 0;
            for (const auto& slot : link.slot()) largest = std::max<size_t>(largest, slot.bytes());
            EXPECT_GE(largest, first) << "slice_bytes=" << given;
            EXPECT_LT(largest, first + 4096) << "slice_bytes=" << given;
          }
          return absl::OkStatus();
        });
    EXPECT_OK(results[0]) << "slice_bytes=" << given;
  }
}

TEST(PsStrategyTest, ShardsAsTheAnalyzerPlacesTheModelGivenItsGraph) {
  // A conv layer and a linear one, as the importers trace them.
  const graph::GraphDef model = graph::testing::TrainingGraphOf(graph::testing::SmallCnnTrace());
  std::vector<Parameter> parameters = {{"conv.weight", at::zeros({2, 1, 3, 3})},
                                       {"conv.bias", at::zeros({2})},
                                       {"fc.weight", at::zeros({3, 32})},
                                       {"fc.bias", at::zeros({3})}};
  graph::PlacementSpec spec;
  spec.strategy = "ps";
  spec.servers = 2;
  spec.workers = 1;
  ASSERT_OK_AND_ASSIGN(graph::GraphDef placed, graph::PlaceTrainingGraph(model, spec));
  ASSERT_OK_AND_ASSIGN(auto planned, graph::PsParameterServers(placed));
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& t, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy,
                         PsStrategy::Create(Options(5, "rdma", {{"servers", "2"}})));
        StrategyContext context{0, 3, &t, &store};
        context.model = &model;
        RETURN_IF_ERROR(strategy->Prepare(context, parameters).status());
        std::map<std::string, int> held;
        for (size_t s = 0; s < strategy->shards().size(); ++s) {
          for (const ShardEntry& e : strategy->shards()[s].entries) {
            held[parameters[e.parameter].name] = static_cast<int>(s);
          }
        }
        EXPECT_EQ(held.size(), planned.size());
        for (const auto& [name, server] : planned) EXPECT_EQ(held[name], server) << name;
        // A parameter the plan does not know is refused, naming it.
        ASSIGN_OR_RETURN(auto renamed,
                         PsStrategy::Create(Options(5, "rdma", {{"servers", "2"}})));
        std::vector<Parameter> other = parameters;
        other[1].name = "conv.offset";
        EXPECT_THAT(renamed->Prepare(context, other).status(),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             ::testing::HasSubstr("'conv.offset' is not in the model's plan")));
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
