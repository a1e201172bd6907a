// Moshpit: the grid's groups (group formation through the store is
// moshpit_group_test.cc); the exact global average
// after d rounds on full grids (4 ranks 2x2, 8 ranks 2x2x2); with one rank
// gone mid-run the others keep averaging, their spread shrinks, and nobody
// hangs. With device parameters (fake devices, one per rank) the rings'
// regions are device memory and the rounds average exactly as on the host.
#include "ATen/Context.h"
#include "ATen/Parallel.h"
#include "ATen/TensorOperators.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/full.h"
#include "ATen/ops/ones_like.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/stack.h"
#include "strategies/moshpit/moshpit_strategy.h"

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/device/testing/fake_device_rank.h"
#include "rdma/testing/in_memory_store.h"
#include "rdma/store.h"
#include "rdma/testing/rank_threads.h"
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

TEST(MoshpitGridTest, GroupOfIsExactlyThePeersSharingTheGroupKey) {
  for (auto [ranks, side, dims] : {std::tuple{8, 2, 0}, std::tuple{27, 3, 0},
                                   std::tuple{20, 3, 0}, std::tuple{5, 2, 6},
                                   std::tuple{100, 4, 0}}) {
    ASSERT_OK_AND_ASSIGN(MoshpitGrid grid, MoshpitGrid::Create(ranks, side, dims));
    for (int round = 0; round < grid.dims() + 1; ++round) {
      for (int rank = 0; rank < ranks; ++rank) {
        std::vector<int> same_key;
        for (int r = 0; r < ranks; ++r) {
          if (grid.GroupKey(r, round) == grid.GroupKey(rank, round)) same_key.push_back(r);
        }
        EXPECT_EQ(grid.GroupOf(rank, round), same_key)
            << ranks << " ranks, side " << side << ", rank " << rank << ", round " << round;
      }
    }
  }
}

// Runs `world` ranks of moshpit with no gradients (pure averaging); rank
// `leaver` (if any) stops after `leave_after` steps. Returns each rank's
// final flat parameters and group sizes.
struct AverageRun {
  std::vector<absl::Status> status;
  std::vector<at::Tensor> start, final;
  std::vector<std::vector<int>> sizes;
  std::vector<int> rings;  // created, by rank
  std::vector<int> device_rings;  // created on device memory, by rank
};

// With `ones`, every step's gradients are all ones (the same local update
// on every rank); with overlap=on in `params`, each compute after the first
// also waits until the round the last step began has ended (a strategy
// that averaged only after compute would time out there).
// With `on_device`, each rank's transport is a DeviceTransport over a fake
// device of its own, on a "host" of its own, and the parameters are device
// parameters (StrategyContext::device).
AverageRun Average(int world, int steps, std::map<std::string, std::string> params,
            int leaver = -1, int leave_after = 0, bool ones = false, bool on_device = false) {
  const bool overlap = params.count("overlap") != 0 && params.at("overlap") == "on";
  AverageRun run;
  run.start.resize(world);
  run.final.resize(world);
  run.sizes.resize(world);
  run.rings.resize(world);
  run.device_rings.resize(world);
  run.status = rdma::testing::RunRankThreadsOwning(
      world,
      [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) -> absl::Status {
        rdma::device_path::testing::FakeDeviceRank device;
        StrategyContext context{rank, world, host.get(), &store};
        if (on_device) {
          ASSIGN_OR_RETURN(device, rdma::device_path::testing::WrapInFakeDevice(
                                       std::move(host), absl::StrCat("moshpit-host-", rank)));
          context.transport = context.device = device.transport.get();
        }
        ASSIGN_OR_RETURN(auto strategy, MoshpitStrategy::Create(ToyOptions(steps, params)));
        at::manual_seed(100 + rank);
        at::Tensor w = at::randn({37});
        at::Tensor b = at::randn({5});
        run.start[rank] = at::cat({w, b});
        std::vector<Parameter> p = {{"w", w.clone()}, {"b", b.clone()}};
        RETURN_IF_ERROR(strategy->Prepare(context, p).status());
        RETURN_IF_ERROR(strategy->Start());
        int64_t computed = 0;
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          const absl::Time deadline = absl::Now() + absl::Seconds(60);
          while (overlap && strategy->rounds_finished() < computed) {
            if (absl::Now() > deadline) {
              return absl::DeadlineExceededError(absl::StrCat(
                  "rank ", rank, "'s round of step ", computed - 1,
                  " did not end during the next compute"));
            }
            std::this_thread::yield();
          }
          ++computed;
          if (ones) {
            for (Parameter& q : p) q.tensor.mutable_grad() = at::ones_like(q.tensor);
          }
          return ComputeResult{};
        };
        int64_t taken = 0;
        while (!strategy->done()) {
          if (rank == leaver && taken == leave_after) break;  // gone
          RETURN_IF_ERROR(strategy->Step(nothing).status());
          ++taken;
        }
        RETURN_IF_ERROR(strategy->Finish());
        run.device_rings[rank] = strategy->device_rings_created();
        run.final[rank] = at::cat({p[0].tensor.detach().flatten(), p[1].tensor.detach()});
        run.sizes[rank] = strategy->group_sizes();
        run.rings[rank] = strategy->rings_created();
        strategy.reset();  // before its transport and device
        return absl::OkStatus();
      });
  return run;
}

TEST(MoshpitStrategyTest, FullGridsGiveTheExactGlobalAverageAfterDRounds) {
  at::set_num_threads(1);
  for (const auto& [world, dims] : std::vector<std::pair<int, int>>{{4, 2}, {8, 3}}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    // 2d rounds: the second d reuse the rings of the first (and averaging
    // the average changes nothing).
    AverageRun run =
        Average(world, 2 * dims, {{"side", "2"}, {"group_timeout_ms", "20000"}});
    for (const absl::Status& s : run.status) ASSERT_OK(s);
    const at::Tensor mean = at::stack(run.start).mean(0);
    for (int r = 0; r < world; ++r) {
      EXPECT_LT((run.final[r] - mean).abs().max().item<double>(), 1e-6) << "rank " << r;
      EXPECT_EQ(run.sizes[r], std::vector<int>(2 * dims, 2)) << "rank " << r;
      EXPECT_EQ(run.rings[r], dims) << "rank " << r;
    }
  }
}

// Device parameters: every ring kept on device memory, the same exact
// global average after d rounds; overlapped rounds on the device keep the
// local progress as on the host (the same final spread from the mean).
TEST(MoshpitStrategyTest, DeviceParametersAverageOnTheDeviceAsOnTheHost) {
  at::set_num_threads(1);
  constexpr int kWorld = 4, kDims = 2;
  const std::map<std::string, std::string> params = {{"side", "2"},
                                                     {"group_timeout_ms", "20000"}};
  AverageRun run = Average(kWorld, 2 * kDims, params, -1, 0, false, /*on_device=*/true);
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  const at::Tensor mean = at::stack(run.start).mean(0);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_LT((run.final[r] - mean).abs().max().item<double>(), 1e-6) << "rank " << r;
    EXPECT_EQ(run.device_rings[r], kDims) << "rank " << r;
  }
  std::map<std::string, std::string> overlapped = params;
  overlapped["overlap"] = "on";
  constexpr int kSteps = 3 * kDims;
  AverageRun host = Average(kWorld, kSteps, overlapped, -1, 0, /*ones=*/true);
  AverageRun device = Average(kWorld, kSteps, overlapped, -1, 0, /*ones=*/true, true);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_OK(host.status[r]) << "rank " << r;
    ASSERT_OK(device.status[r]) << "rank " << r;
  }
  const at::Tensor host_mean = at::stack(host.start).mean(0);
  const at::Tensor device_mean = at::stack(device.start).mean(0);
  for (int r = 0; r < kWorld; ++r) {
    const at::Tensor moved = host.final[r] - host_mean;
    EXPECT_GT(moved.abs().min().item<double>(), 0.1) << "rank " << r;
    EXPECT_LT(((device.final[r] - device_mean) - moved).abs().max().item<double>(), 1e-5)
        << "rank " << r;
    EXPECT_EQ(device.device_rings[r], kDims) << "rank " << r;
    EXPECT_EQ(host.device_rings[r], 0) << "rank " << r;
  }
}

// Overlapped rounds average snapshots during the next compute and move each
// replica by what its round changed: with the same local update on every
// rank, 4 ranks end where the rounds without overlap end them (the global
// mean of the start plus every update), the local progress made during
// each round included.
TEST(MoshpitStrategyTest, OverlappedRoundsRunDuringComputeAndKeepTheLocalProgress) {
  at::set_num_threads(1);
  constexpr int kWorld = 4, kDims = 2, kSteps = 3 * kDims;
  const std::map<std::string, std::string> params = {{"side", "2"},
                                                     {"group_timeout_ms", "20000"}};
  std::map<std::string, std::string> overlapped = params;
  overlapped["overlap"] = "on";
  AverageRun before = Average(kWorld, kSteps, params, -1, 0, /*ones=*/true);
  AverageRun after = Average(kWorld, kSteps, overlapped, -1, 0, /*ones=*/true);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_OK(before.status[r]) << "rank " << r;
    ASSERT_OK(after.status[r]) << "rank " << r;
  }
  // Each run's start is its own (the ranks' threads draw from one
  // generator): each is compared with its own start's mean.
  const at::Tensor mean_before = at::stack(before.start).mean(0);
  const at::Tensor mean_after = at::stack(after.start).mean(0);
  for (int r = 0; r < kWorld; ++r) {
    const at::Tensor moved = before.final[r] - mean_before;
    // The updates moved every replica away from the mean, the same way.
    EXPECT_GT(moved.abs().min().item<double>(), 0.1) << "rank " << r;
    EXPECT_LT(((after.final[r] - mean_after) - moved).abs().max().item<double>(), 1e-5)
        << "rank " << r;
    EXPECT_EQ(after.sizes[r], std::vector<int>(kSteps, 2)) << "rank " << r;
  }
}

// A fresh start builds every grid group's ring before the first step; the
// rounds then reuse them and build none.
TEST(MoshpitStrategyTest, GridRingsAreBuiltBeforeTheFirstStep) {
  at::set_num_threads(1);
  constexpr int kWorld = 8, kDims = 3;
  std::vector<int> before(kWorld, -1), after(kWorld, -1);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kWorld, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, MoshpitStrategy::Create(ToyOptions(
                                            2 * kDims, {{"side", "2"},
                                                        {"group_timeout_ms", "20000"}})));
        std::vector<Parameter> p = {{"w", at::randn({16})}};
        RETURN_IF_ERROR(strategy->Prepare({rank, kWorld, &transport, &store}, p).status());
        RETURN_IF_ERROR(strategy->Start());
        before[rank] = strategy->rings_created();
        ComputeFn nothing = [] { return absl::StatusOr<ComputeResult>(ComputeResult{}); };
        while (!strategy->done()) RETURN_IF_ERROR(strategy->Step(nothing).status());
        after[rank] = strategy->rings_created();
        return strategy->Finish();
      });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_OK(status[r]) << "rank " << r;
    EXPECT_EQ(before[r], kDims) << "rank " << r;
    EXPECT_EQ(after[r], kDims) << "rank " << r;
  }
}

TEST(MoshpitStrategyTest, ARankThatLeavesShrinksItsGroupsAndTheOthersGoOn) {
  at::set_num_threads(1);
  constexpr int kWorld = 4, kSteps = 8;
  AverageRun run = Average(kWorld, kSteps, {{"side", "2"}, {"group_timeout_ms", "300"}},
                    /*leaver=*/3, /*leave_after=*/2);
  for (const absl::Status& s : run.status) ASSERT_OK(s);
  // Survivors: every round ran; the rounds after rank 3 left that would have
  // included it have a group of 1.
  std::vector<at::Tensor> start, final;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.sizes[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    start.push_back(run.start[r]);
    final.push_back(run.final[r]);
  }
  EXPECT_EQ(run.sizes[1][3], 1);  // round 3 (dim 1): {1, 3} without 3
  EXPECT_EQ(run.sizes[2][2], 1);  // round 2 (dim 0): {2, 3} without 3
  auto spread = [](const std::vector<at::Tensor>& x) {
    at::Tensor m = at::stack(x).mean(0);
    double worst = 0;
    for (const at::Tensor& v : x) worst = std::max(worst, (v - m).norm().item<double>());
    return worst;
  };
  EXPECT_LT(spread(final), 0.05 * spread(start));
}

TEST(MoshpitStrategyTest, ARestartedRankRejoinsAndAdoptsItsGroupsParameters) {
  at::set_num_threads(1);
  constexpr int kWorld = 4, kSteps = 12;
  const std::map<std::string, std::string> params = {{"side", "2"},
                                                     {"group_timeout_ms", "300"}};
  std::vector<at::Tensor> start(kWorld), final(kWorld);
  std::vector<int64_t> steps_taken(kWorld, 0);
  std::vector<std::vector<int>> sizes(kWorld);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kWorld, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto strategy, MoshpitStrategy::Create(ToyOptions(kSteps, params)));
        at::manual_seed(100 + rank);
        start[rank] = at::randn({41});
        std::vector<Parameter> p = {{"w", start[rank].clone()}};
        RETURN_IF_ERROR(strategy->Prepare({rank, kWorld, &transport, &store}, p).status());
        RETURN_IF_ERROR(strategy->Start());
        int64_t step = 0;
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          // The survivors reach step 5, and go on only once rank 3 is back.
          if (rank != 3 && step++ == 5) {
            ASSIGN_OR_RETURN(int64_t there, store.Add("at5", 1));
            if (there == 3) RETURN_IF_ERROR(store.Set("all_at5", "1"));
            RETURN_IF_ERROR(store.Wait({"back"}, absl::Seconds(60)));
          }
          return ComputeResult{};
        };
        if (rank == 3) {
          for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(strategy->Step(nothing).status());
          // Dies (no Finish), and a new process of rank 3 starts from far
          // away parameters: they must not pull the others there.
          strategy.reset();
          RETURN_IF_ERROR(store.Wait({"all_at5"}, absl::Seconds(60)));
          ASSIGN_OR_RETURN(strategy, MoshpitStrategy::Create(ToyOptions(kSteps, params)));
          p = {{"w", at::full({41}, 1000.0f)}};
          strategies::StrategyContext context{rank, kWorld, &transport, &store};
          context.rejoining = true;
          RETURN_IF_ERROR(strategy->Prepare(context, p).status());
          RETURN_IF_ERROR(strategy->Start());
          RETURN_IF_ERROR(store.Set("back", "1"));
        }
        while (!strategy->done()) {
          RETURN_IF_ERROR(strategy->Step(nothing).status());
          ++steps_taken[rank];
        }
        RETURN_IF_ERROR(strategy->Finish());
        final[rank] = p[0].tensor.detach().clone();
        sizes[rank] = strategy->group_sizes();
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) ASSERT_OK(s);
  // The rejoined rank started where the others were (round 4: their
  // rounds 0-4 are done), not at step 0.
  EXPECT_EQ(steps_taken[3], kSteps - 4);
  EXPECT_EQ(steps_taken[0], kSteps);
  // It averaged in a group again.
  EXPECT_NE(std::find(sizes[3].begin(), sizes[3].end(), 2), sizes[3].end());
  // Everyone, the rejoined rank included, holds values from the original
  // starts' range: its 1000s counted with weight 0.
  const at::Tensor lo = std::get<0>(at::stack(start).min(0)) - 1e-4;
  const at::Tensor hi = std::get<0>(at::stack(start).max(0)) + 1e-4;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE((final[r] >= lo).all().item<bool>() && (final[r] <= hi).all().item<bool>())
        << "rank " << r << ": " << final[r].max().item<float>();
  }
}

}  // namespace
}  // namespace rdmaflow::strategies::moshpit
