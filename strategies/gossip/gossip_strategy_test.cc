// Gossiping SGD: the peer choice; the consensus distance of fixed vectors
// shrinking geometrically under repeated mixing (a simulation of the
// schedule, then the strategy itself with ranks as threads reading each
// other's versioned buffers); training the toy problem; bad parameters.
#include "strategies/gossip/gossip_strategy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "rdma/rendezvous.h"
#include "runtime/testing/rank_threads.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::gossip {
namespace {

using ::rdmaflow::strategies::testing::ToyOptions;
using ::rdmaflow::strategies::testing::ToyProblem;
using ::rdmaflow::testing::StatusIs;

// max_i |x_i - mean| (Euclidean).
double ConsensusDistance(const std::vector<torch::Tensor>& x) {
  torch::Tensor mean = torch::stack(x).mean(0);
  double worst = 0;
  for (const torch::Tensor& v : x) worst = std::max(worst, (v - mean).norm().item<double>());
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
  torch::manual_seed(3);
  std::vector<torch::Tensor> x;
  std::vector<PeerSelector> peers;
  for (int r = 0; r < kRanks; ++r) {
    x.push_back(torch::randn({16}));
    peers.emplace_back(Topology::kRandom, r, kRanks, 11);
  }
  double last = ConsensusDistance(x);
  for (int block = 0; block < 5; ++block) {
    for (int round = 0; round < 10; ++round) {
      std::vector<torch::Tensor> next;
      for (int r = 0; r < kRanks; ++r) next.push_back(0.5 * x[r] + 0.5 * x[peers[r].Next()]);
      x = next;
    }
    const double now = ConsensusDistance(x);
    EXPECT_LT(now, 0.5 * last) << "block " << block;  // at least 2x per 10 rounds
    last = now;
  }
}

TEST(GossipStrategyTest, ReplicasReachConsensusThroughOneSidedReads) {
  torch::set_num_threads(1);
  constexpr int kRanks = 4, kSteps = 30;
  std::vector<std::vector<torch::Tensor>> start(kRanks), final(kRanks);
  std::vector<std::vector<int>> mixed(kRanks);
  std::vector<absl::Status> status = runtime::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy,
                         GossipStrategy::Create(ToyOptions(kSteps, {{"topology", "ring"}})));
        // Each rank starts elsewhere; no gradients: pure mixing.
        torch::Tensor a = torch::full({100}, static_cast<float>(rank * 10));
        torch::Tensor b = torch::arange(7, torch::kFloat32) * (rank - 1.5f);
        std::vector<Parameter> params = {{"a", a.clone()}, {"b", b.clone()}};
        start[rank] = {a, b};
        RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &transport, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        // No gradients, and the ranks kept within a step of each other (a
        // store barrier per step), so every mix sees a recent peer.
        int step = 0;
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          RETURN_IF_ERROR(rdma::Barrier(store, "test", absl::StrCat("step", step++),
                                        kRanks, absl::Seconds(60)));
          return ComputeResult{};
        };
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(nothing).status());
        RETURN_IF_ERROR(strategy->Finish());
        for (const Parameter& p : params) final[rank].push_back(p.tensor.detach().clone());
        mixed[rank] = strategy->peers_mixed();
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<torch::Tensor> before, after;
    for (int r = 0; r < kRanks; ++r) {
      before.push_back(start[r][i]);
      after.push_back(final[r][i]);
    }
    const double d0 = ConsensusDistance(before), d1 = ConsensusDistance(after);
    EXPECT_LT(d1, 1e-2 * d0) << "parameter " << i << ": " << d0 << " -> " << d1;
    // Mixing only averages: every value stays within the initial range.
    const double lo = torch::stack(before).min().item<double>();
    const double hi = torch::stack(before).max().item<double>();
    for (const torch::Tensor& t : after) {
      EXPECT_GE(t.min().item<double>(), lo - 1e-5);
      EXPECT_LE(t.max().item<double>(), hi + 1e-5);
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(mixed[r], std::vector<int>(kSteps, (r + 1) % kRanks));
  }
}

TEST(GossipStrategyTest, TrainsTheToyProblem) {
  torch::set_num_threads(1);
  constexpr int kRanks = 3, kSteps = 40;
  const ToyProblem problem(kRanks, kSteps, 16);
  std::vector<double> first(kRanks), last(kRanks);
  std::vector<absl::Status> status = runtime::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy,
                         GossipStrategy::Create(ToyOptions(kSteps, {{"period", "2"}})));
        std::vector<Parameter> params = problem.MakeParameters();
        RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &transport, &store}, params).status());
        RETURN_IF_ERROR(strategy->Start());
        int t = 0;
        ComputeFn compute = [&]() -> absl::StatusOr<ComputeResult> {
          std::vector<torch::Tensor> p;
          for (const Parameter& param : params) p.push_back(param.tensor);
          torch::Tensor loss = ToyProblem::Loss(p, problem.x[rank][t], problem.y[rank][t]);
          loss.backward();
          ++t;
          return ComputeResult{loss.item<double>(), 0, 16};
        };
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(compute).status());
        RETURN_IF_ERROR(strategy->Finish());
        EXPECT_EQ(strategy->peers_mixed().size(), static_cast<size_t>(kSteps / 2));
        // The loss on all of the data, before and after.
        torch::NoGradGuard no_grad;
        torch::Tensor x = torch::cat(problem.x[0]), y = torch::cat(problem.y[0]);
        std::vector<torch::Tensor> p;
        for (const Parameter& param : params) p.push_back(param.tensor);
        first[rank] = ToyProblem::Loss(problem.init, x, y).item<double>();
        last[rank] = ToyProblem::Loss(p, x, y).item<double>();
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  for (int r = 0; r < kRanks; ++r) EXPECT_LT(last[r], 0.9 * first[r]) << "rank " << r;
}

TEST(GossipStrategyTest, BadParametersAreNamed) {
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"beta", "0"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("beta")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"topology", "star"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("random, ring")));
  EXPECT_THAT(GossipStrategy::Create(ToyOptions(1, {{"mode", "push"}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("known")));
}

}  // namespace
}  // namespace rdmaflow::strategies::gossip
