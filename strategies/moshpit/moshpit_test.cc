// Moshpit: the grid's groups; group formation through the store (full,
// shrunk by a missing peer, a late peer alone); the exact global average
// after d rounds on full grids (4 ranks 2x2, 8 ranks 2x2x2); with one rank
// gone mid-run the others keep averaging, their spread shrinks, and nobody
// hangs.
#include "strategies/moshpit/moshpit_strategy.h"

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/testing/in_memory_store.h"
#include "runtime/testing/rank_threads.h"
#include "strategies/moshpit/moshpit_group.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::moshpit {
namespace {

using ::rdmaflow::strategies::testing::ToyOptions;
using ::rdmaflow::testing::StatusIs;

TEST(MoshpitGridTest, GroupsShareAllCoordinatesButTheRoundsDimension) {
  ASSERT_OK_AND_ASSIGN(MoshpitGrid grid, MoshpitGrid::Create(8, 2, 0));
  EXPECT_EQ(grid.dims(), 3);
  EXPECT_EQ(grid.Coordinates(6), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(grid.GroupOf(6, 0), (std::vector<int>{6, 7}));
  EXPECT_EQ(grid.GroupOf(6, 1), (std::vector<int>{4, 6}));
  EXPECT_EQ(grid.GroupOf(6, 2), (std::vector<int>{2, 6}));
  EXPECT_EQ(grid.GroupOf(6, 3), grid.GroupOf(6, 0));
  ASSERT_OK_AND_ASSIGN(MoshpitGrid partial, MoshpitGrid::Create(5, 3, 0));
  EXPECT_EQ(partial.dims(), 2);
  EXPECT_EQ(partial.GroupOf(4, 0), (std::vector<int>{3, 4}));  // 5 is missing
  EXPECT_THAT(MoshpitGrid::Create(9, 2, 3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("dims >= 4")));
}

TEST(FormGroupTest, FullShrunkAndLate) {
  rdma::testing::InMemoryStore store;
  std::vector<std::vector<int>> got(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_OK_AND_ASSIGN(got[r], FormGroup(store, "full", r * 10, 4, absl::Seconds(30)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], (std::vector<int>{0, 10, 20, 30}));
  // Three of four come: after the timeout the three form the group; the
  // fourth, arriving after the seal, is alone.
  threads.clear();
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_OK_AND_ASSIGN(got[r], FormGroup(store, "shrunk", r, 4, absl::Milliseconds(100)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[r], (std::vector<int>{0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(got[3], FormGroup(store, "shrunk", 3, 4, absl::Seconds(30)));
  EXPECT_EQ(got[3], (std::vector<int>{3}));
}

// Runs `world` ranks of moshpit with no gradients (pure averaging); rank
// `leaver` (if any) stops after `leave_after` steps. Returns each rank's
// final flat parameters and group sizes.
struct AverageRun {
  std::vector<absl::Status> status;
  std::vector<torch::Tensor> start, final;
  std::vector<std::vector<int>> sizes;
  std::vector<int> rings;  // created, by rank
};

AverageRun Average(int world, int steps, std::map<std::string, std::string> params,
            int leaver = -1, int leave_after = 0) {
  AverageRun run;
  run.start.resize(world);
  run.final.resize(world);
  run.sizes.resize(world);
  run.rings.resize(world);
  run.status = runtime::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, MoshpitStrategy::Create(ToyOptions(steps, params)));
        torch::manual_seed(100 + rank);
        torch::Tensor w = torch::randn({37});
        torch::Tensor b = torch::randn({5});
        run.start[rank] = torch::cat({w, b});
        std::vector<Parameter> p = {{"w", w.clone()}, {"b", b.clone()}};
        RETURN_IF_ERROR(strategy->Prepare({rank, world, &transport, &store}, p).status());
        RETURN_IF_ERROR(strategy->Start());
        ComputeFn nothing = [] { return absl::StatusOr<ComputeResult>(ComputeResult{}); };
        int64_t taken = 0;
        while (!strategy->done()) {
          if (rank == leaver && taken == leave_after) break;  // gone
          RETURN_IF_ERROR(strategy->Step(nothing).status());
          ++taken;
        }
        RETURN_IF_ERROR(strategy->Finish());
        run.final[rank] = torch::cat({p[0].tensor.detach().flatten(), p[1].tensor.detach()});
        run.sizes[rank] = strategy->group_sizes();
        run.rings[rank] = strategy->rings_created();
        return absl::OkStatus();
      });
  return run;
}

TEST(MoshpitStrategyTest, FullGridsGiveTheExactGlobalAverageAfterDRounds) {
  torch::set_num_threads(1);
  for (const auto& [world, dims] : std::vector<std::pair<int, int>>{{4, 2}, {8, 3}}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    // 2d rounds: the second d reuse the rings of the first (and averaging
    // the average changes nothing).
    AverageRun run =
        Average(world, 2 * dims, {{"side", "2"}, {"group_timeout_ms", "20000"}});
    for (const absl::Status& s : run.status) ASSERT_OK(s);
    const torch::Tensor mean = torch::stack(run.start).mean(0);
    for (int r = 0; r < world; ++r) {
      EXPECT_LT((run.final[r] - mean).abs().max().item<double>(), 1e-6) << "rank " << r;
      EXPECT_EQ(run.sizes[r], std::vector<int>(2 * dims, 2)) << "rank " << r;
      EXPECT_EQ(run.rings[r], dims) << "rank " << r;
    }
  }
}

TEST(MoshpitStrategyTest, ARankThatLeavesShrinksItsGroupsAndTheOthersGoOn) {
  torch::set_num_threads(1);
  constexpr int kWorld = 4, kSteps = 8;
  AverageRun run = Average(kWorld, kSteps, {{"side", "2"}, {"group_timeout_ms", "300"}},
                    /*leaver=*/3, /*leave_after=*/2);
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  // Survivors: every round ran; the rounds after rank 3 left that would have
  // included it have a group of 1.
  std::vector<torch::Tensor> start, final;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.sizes[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    start.push_back(run.start[r]);
    final.push_back(run.final[r]);
  }
  EXPECT_EQ(run.sizes[1][3], 1);  // round 3 (dim 1): {1, 3} without 3
  EXPECT_EQ(run.sizes[2][2], 1);  // round 2 (dim 0): {2, 3} without 3
  auto spread = [](const std::vector<torch::Tensor>& x) {
    torch::Tensor m = torch::stack(x).mean(0);
    double worst = 0;
    for (const torch::Tensor& v : x) worst = std::max(worst, (v - m).norm().item<double>());
    return worst;
  };
  EXPECT_LT(spread(final), 0.05 * spread(start));
}

}  // namespace
}  // namespace rdmaflow::strategies::moshpit
