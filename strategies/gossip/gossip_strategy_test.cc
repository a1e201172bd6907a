// Gossiping SGD: the peer choice; the consensus distance of fixed vectors
// shrinking geometrically under repeated mixing (a simulation of the
// schedule, then the strategy itself with ranks as threads reading each
// other's versioned buffers); training the toy problem; bad parameters.
#include "ATen/Context.h"
#include "ATen/Parallel.h"
#include "ATen/TensorOperators.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/full.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/stack.h"
#include "strategies/gossip/gossip_strategy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rdma/device/device_transport.h"
#include "rdma/device/testing/fake_device_rank.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/connect_counter.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::gossip {
namespace {

using ::rdmaflow::strategies::testing::ToyOptions;
using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;

// max_i |x_i - mean| (Euclidean).
double ConsensusDistance(const std::vector<at::Tensor>& x) {
  at::Tensor mean = at::stack(x).mean(0);
  double worst = 0;
  for (const at::Tensor& v : x) worst = std::max(worst, (v - mean).norm().item<double>());
  return worst;
}

TEST(PeerSelectorTest, RandomIsUniformOverTheOthersAndSeededRingIsTheNext) {
  PeerSelector a(Topology::kRandom, 2, 5, 7), b(Topology::kRandom, 2, 5, 7);
  std::map<int, int> seen;
  for (int i = 0; i < 4000; ++i) {
    const int peer = a.Next();
    EXPECT_EQ(peer, b.Next());  // same seed, same draws
    ++seen[peer];
  }
  EXPECT_EQ(seen.count(2), 0u);
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& [peer, n] : seen) EXPECT_NEAR(n, 1000, 150) << peer;
  PeerSelector ring(Topology::kRing, 4, 5, 7);
  EXPECT_EQ(ring.Next(), 0);
  EXPECT_THAT(ParseTopology("star").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GossipMixingTest, ConsensusDistanceShrinksGeometrically) {
  // 8 vectors, every round each mixes with a random peer's previous value.
  constexpr int kRanks = 8;
  at::manual_seed(3);
  std::vector<at::Tensor> x;
  std::vector<PeerSelector> peers;
  for (int r = 0; r < kRanks; ++r) {
    x.push_back(at::randn({16}));
    peers.emplace_back(Topology::kRandom, r, kRanks, 11);
  }
  double last = ConsensusDistance(x);
  for (int block = 0; block < 5; ++block) {
    for (int round = 0; round < 10; ++round) {
      std::vector<at::Tensor> next;
      for (int r = 0; r < kRanks; ++r) next.push_back(0.5 * x[r] + 0.5 * x[peers[r].Next()]);
      x = next;
    }
    const double now = ConsensusDistance(x);
    EXPECT_LT(now, 0.5 * last) << "block " << block;  // at least 2x per 10 rounds
    last = now;
  }
}

// Pure mixing (no gradients) of 4 ranks on a ring, kept within a step of
// each other by a store barrier per step, in the given mode. Rank `leaver`
// (if any) dies after `leave_after` steps: it drops its strategy and its
// transport, so its peers' operations on it fail.
struct MixRun {
  std::vector<absl::Status> status;
  std::vector<at::Tensor> start, final;
  std::vector<std::vector<int>> mixed, lost;
  // Endpoints each rank's transport connected, and its links' count.
  std::vector<int64_t> connected, link_endpoints;
};

// With `overlap`, each compute after the first also waits until the read
// the last step started has returned: a strategy that read only after
// compute would time out there.
MixRun Mix(const std::string& mode, int steps, int leaver = -1, int leave_after = 0,
           bool overlap = false) {
  at::set_num_threads(1);
  constexpr int kRanks = 4;
  MixRun run;
  run.start.resize(kRanks);
  run.final.resize(kRanks);
  run.mixed.resize(kRanks);
  run.lost.resize(kRanks);
  run.connected.resize(kRanks);
  run.link_endpoints.resize(kRanks);
  run.status = rdma::testing::RunRankThreadsOwning(
      kRanks, [&](int rank, std::unique_ptr<rdma::Transport>& transport,
                  rdma::Store& store) -> absl::Status {
        // Declared before the strategy: it goes after it.
        rdma::testing::ConnectCounter counting(*transport);
        ASSIGN_OR_RETURN(auto strategy,
                         GossipStrategy::Create(ToyOptions(
                             steps, {{"topology", "ring"},
                                     {"mode", mode},
                                     {"overlap", overlap ? "on" : "off"}})));
        // Each rank starts elsewhere.
        at::Tensor a = at::full({100}, static_cast<float>(100 + rank * 10));
        at::Tensor b = at::arange(7, at::kFloat) * (rank - 1.5f);
        std::vector<Parameter> params = {{"a", a.clone()}, {"b", b.clone()}};
        run.start[rank] = at::cat({a, b});
        RETURN_IF_ERROR(
            strategy->Prepare({rank, kRanks, &counting, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        int step = 0;
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          if (overlap && step > 0) {
            const absl::Time deadline = absl::Now() + absl::Seconds(60);
            while (strategy->reads_finished() < step) {
              if (absl::Now() > deadline) {
                return absl::DeadlineExceededError(absl::StrCat(
                    "rank ", rank, "'s read of step ", step - 1,
                    " did not return during the next compute"));
              }
              std::this_thread::yield();
            }
          }
          if (leaver >= 0 && step == leave_after) {
            // Every rank is past its last exchange with the leaver alive.
            RETURN_IF_ERROR(rdma::Barrier(store, "test", "leave", kRanks, absl::Seconds(60)));
            RETURN_IF_ERROR(store.Wait({"test/left"}, absl::Seconds(60)));
          }
          const int ranks = leaver >= 0 && step >= leave_after ? kRanks - 1 : kRanks;
          RETURN_IF_ERROR(rdma::Barrier(store, "test", absl::StrCat("step", step++), ranks,
                                        absl::Seconds(60)));
          return ComputeResult{};
        };
        for (int taken = 0; !strategy->done(); ++taken) {
          if (rank == leaver && taken == leave_after) {
            RETURN_IF_ERROR(rdma::Barrier(store, "test", "leave", kRanks, absl::Seconds(60)));
            strategy.reset();
            transport.reset();  // dead
            return store.Set("test/left", "1");
          }
          RETURN_IF_ERROR(strategy->Step(nothing).status());
        }
        RETURN_IF_ERROR(strategy->Finish());
        run.final[rank] = at::cat({params[0].tensor, params[1].tensor}).detach().clone();
        run.mixed[rank] = strategy->peers_mixed();
        run.lost[rank] = strategy->peers_lost();
        run.connected[rank] = counting.connected();
        run.link_endpoints[rank] = strategy->link_stats().endpoints;
        return absl::OkStatus();
      });
  return run;
}

// Mixing only averages: every value stays within the initial range.
void ExpectWithinStartRange(const MixRun& run, const std::vector<int>& ranks) {
  std::vector<at::Tensor> before;
  for (const at::Tensor& t : run.start) before.push_back(t);
  const at::Tensor lo = std::get<0>(at::stack(before).min(0)) - 1e-5;
  const at::Tensor hi = std::get<0>(at::stack(before).max(0)) + 1e-5;
  for (int r : ranks) {
    EXPECT_TRUE((run.final[r] >= lo).all().item<bool>()) << "rank " << r;
    EXPECT_TRUE((run.final[r] <= hi).all().item<bool>()) << "rank " << r;
  }
}

// Every rank finished, and the replicas came within 1 % of the start's
// consensus distance, inside the initial range.
void ExpectConsensusOfAll(const MixRun& run) {
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  const double d0 = ConsensusDistance(run.start), d1 = ConsensusDistance(run.final);
  EXPECT_LT(d1, 1e-2 * d0) << d0 << " -> " << d1;
  ExpectWithinStartRange(run, {0, 1, 2, 3});
}

// A pulled replica is the peer's of this step or, when the peer has not
// published yet, of the step before (the per-step barrier bounds it). Always
// one step stale, the slowest ring mode of 4 ranks at beta 0.5 shrinks by
// only 0.91 a step: 30 steps leave 5 % of the distance, 100 leave 1e-4, so
// the 1 % bound below holds for every interleaving of the ranks.
constexpr int kMixSteps = 100;

TEST(GossipStrategyTest, ReplicasReachConsensusThroughOneSidedReads) {
  constexpr int kSteps = kMixSteps;
  MixRun run = Mix("pull", kSteps);
  ExpectConsensusOfAll(run);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(run.mixed[r], std::vector<int>(kSteps, (r + 1) % 4));
    EXPECT_TRUE(run.lost[r].empty());
    // A reader of every peer, each on the links' one endpoint to it.
    EXPECT_EQ(run.connected[r], 3) << "rank " << r;
    EXPECT_EQ(run.link_endpoints[r], 3) << "rank " << r;
  }
}

TEST(GossipStrategyTest, OverlappedReadsRunDuringComputeAndStillReachConsensus) {
  constexpr int kSteps = kMixSteps;
  MixRun run = Mix("pull", kSteps, -1, 0, /*overlap=*/true);
  ExpectConsensusOfAll(run);
  for (int r = 0; r < 4; ++r) {
    // Every step's read is mixed, the last one by Finish().
    EXPECT_EQ(run.mixed[r], std::vector<int>(kSteps, (r + 1) % 4));
    EXPECT_TRUE(run.lost[r].empty());
    EXPECT_EQ(run.connected[r], 3) << "rank " << r;
  }
}

TEST(GossipStrategyTest, ReplicasReachConsensusThroughOneSidedWritesInPushMode) {
  constexpr int kSteps = kMixSteps;
  MixRun run = Mix("push", kSteps);
  ExpectConsensusOfAll(run);
  for (int r = 0; r < 4; ++r) {
    // Every message comes from the previous rank. A slot keeps only the
    // latest message, and one being overwritten is left for the next step,
    // so some of the steps' messages are never mixed (about 1 in 4 here).
    EXPECT_GE(run.mixed[r].size(), static_cast<size_t>(kSteps / 4)) << "rank " << r;
    // The mailbox reaches every peer over the links' one endpoint to it.
    EXPECT_EQ(run.connected[r], 3) << "rank " << r;
    EXPECT_EQ(run.link_endpoints[r], 3) << "rank " << r;
    for (int sender : run.mixed[r]) EXPECT_EQ(sender, (r + 3) % 4) << "rank " << r;
  }
}

TEST(GossipStrategyTest, SurvivorsOfADeadRankSkipItAndStillReachConsensus) {
  for (const std::string mode : {"pull", "push", "pull+overlap"}) {
    SCOPED_TRACE(mode);
    const bool overlap = mode == "pull+overlap";
    MixRun run = Mix(overlap ? "pull" : mode, kMixSteps, /*leaver=*/3, /*leave_after=*/3,
                     overlap);
    for (const absl::Status& s : run.status) ASSERT_OK(s);
    std::vector<at::Tensor> start, after;
    for (int r = 0; r < 3; ++r) {
      start.push_back(run.start[r]);
      after.push_back(run.final[r]);
      // Found in an exchange (its ring neighbour) or while finishing.
      EXPECT_EQ(run.lost[r], std::vector<int>{3}) << "rank " << r;
    }
    EXPECT_LT(ConsensusDistance(after), 1e-2 * ConsensusDistance(start));
    ExpectWithinStartRange(run, {0, 1, 2});
  }
}

// Trains the toy problem on 3 ranks, mixing every 2 steps: each rank's loss
// on all of the data falls. With `on_device` (device parameters, pull),
// each rank's transport is a DeviceTransport over a fake device of its
// own, on a "host" of its own (the fake device's IPC opens only in another
// process: tests/strategies_train_e2e_test runs the same-host path, as
// processes), so reads of a peer's device copies are staged and answered
// by its progress; the published copies and the scratch are device
// memory, and push, whose mailbox is host memory, refuses device
// parameters.
void TrainToy(bool on_device) {
  at::set_num_threads(1);
  constexpr int kRanks = 3, kSteps = 40;
  const ToyProblem problem(kRanks, kSteps, 16);
  std::vector<double> first(kRanks), last(kRanks);
  std::vector<absl::Status> status = rdma::testing::RunRankThreadsOwning(
      kRanks,
      [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) -> absl::Status {
        rdma::device_path::testing::FakeDeviceRank device;
        StrategyContext context{rank, kRanks, host.get(), &store};
        std::vector<Parameter> params = problem.MakeParameters();
        if (on_device) {
          ASSIGN_OR_RETURN(device, rdma::device_path::testing::WrapInFakeDevice(
                                       std::move(host), absl::StrCat("gossip-host-", rank)));
          context.transport = context.device = device.transport.get();
          ASSIGN_OR_RETURN(auto push,
                           GossipStrategy::Create(ToyOptions(kSteps, {{"mode", "push"}})));
          EXPECT_FALSE(push->takes_device_parameters());
          EXPECT_THAT(push->Prepare(context, params).status(),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               ::testing::HasSubstr("exchanges host parameters only")));
        }
        ASSIGN_OR_RETURN(auto strategy,
                         GossipStrategy::Create(ToyOptions(kSteps, {{"period", "2"}})));
        EXPECT_TRUE(strategy->takes_device_parameters());
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        RETURN_IF_ERROR(strategy->Start());
        EXPECT_EQ(strategy->exchanges_on_device(), on_device);
        ComputeFn compute = problem.Compute(params, rank);
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(compute).status());
        RETURN_IF_ERROR(strategy->Finish());
        EXPECT_EQ(strategy->peers_mixed().size(), static_cast<size_t>(kSteps / 2));
        EXPECT_TRUE(strategy->peers_lost().empty());
        // The loss on all of the data, before and after.
        at::NoGradGuard no_grad;
        at::Tensor x = at::cat(problem.x[0]), y = at::cat(problem.y[0]);
        std::vector<at::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        first[rank] = ToyProblem::Loss(problem.init, x, y).item<double>();
        last[rank] = ToyProblem::Loss(p, x, y).item<double>();
        strategy.reset();  // before the transport and the device it used
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  for (int r = 0; r < kRanks; ++r) EXPECT_LT(last[r], 0.9 * first[r]) << "rank " << r;
}

TEST(GossipStrategyTest, TrainsTheToyProblem) { TrainToy(/*on_device=*/false); }

TEST(GossipStrategyTest, DeviceParametersTrainThroughDeviceCopies) {
  TrainToy(/*on_device=*/true);
}

// Pure mixing on device parameters (4 ranks on a ring, running free: a
// per-step barrier that does not progress would stall the staged reads):
// every value a rank ends with is an average of what the ranks started
// with, never fresh device memory's garbage (NaN), the zeros of a copy
// never published or a torn copy, and the replicas come together. Where
// they meet depends on the interleaving (a rank that stalls while the
// others pull its values draws them all to its own: a mean of 28.5 of
// starts 0-30 was seen under load), so the starts of `a` (100-130) keep
// zeros outside their range rather than a bound on the mean.
TEST(GossipStrategyTest, DeviceCopiesMixOnlyWhatPeersPublished) {
  at::set_num_threads(1);
  constexpr int kRanks = 4;
  MixRun run;
  run.start.resize(kRanks);
  run.final.resize(kRanks);
  run.status = rdma::testing::RunRankThreadsOwning(
      kRanks,
      [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(rdma::device_path::testing::FakeDeviceRank device,
                         rdma::device_path::testing::WrapInFakeDevice(
                             std::move(host), absl::StrCat("gossip-mix-host-", rank)));
        std::unique_ptr<rdma::device_path::DeviceTransport>& transport = device.transport;
        ASSIGN_OR_RETURN(auto strategy, GossipStrategy::Create(ToyOptions(
                                            kMixSteps, {{"topology", "ring"}})));
        at::Tensor a = at::full({100}, static_cast<float>(100 + rank * 10));
        at::Tensor b = at::arange(7, at::kFloat) * (rank - 1.5f);
        std::vector<Parameter> params = {{"a", a.clone()}, {"b", b.clone()}};
        run.start[rank] = at::cat({a, b});
        StrategyContext context{rank, kRanks, transport.get(), &store};
        context.device = transport.get();
        RETURN_IF_ERROR(strategy->Prepare(context, params).status());
        RETURN_IF_ERROR(strategy->Start());
        ComputeFn nothing = []() -> absl::StatusOr<ComputeResult> { return ComputeResult{}; };
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(nothing).status());
        RETURN_IF_ERROR(strategy->Finish());
        EXPECT_EQ(strategy->peers_mixed(), std::vector<int>(kMixSteps, (rank + 1) % kRanks));
        run.final[rank] = at::cat({params[0].tensor, params[1].tensor}).detach().clone();
        strategy.reset();  // before the transport and the device it used
        return absl::OkStatus();
      });
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  ExpectWithinStartRange(run, {0, 1, 2, 3});
  EXPECT_LT(ConsensusDistance(run.final), 0.5 * ConsensusDistance(run.start));
}

TEST(GossipStrategyTest, BadParametersAreNamed) {
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"beta", "0"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("beta")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"topology", "star"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("random, ring")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"mode", "broadcast"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("pull, push")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"mode", "push"}, {"overlap", "on"}}))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("mode=pull")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"overlap", "yes"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("off, on")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"speed", "2"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("known")));
}

}  // namespace
}  // namespace rdmaflow::strategies::gossip
