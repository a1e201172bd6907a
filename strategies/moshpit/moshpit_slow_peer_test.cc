// Moshpit with one peer slower than the timeout (the slow-peer suite): 4
// ranks on a 2x2 grid as threads, pure averaging, round_timeout 1 s. Rank
// 3 freezes inside round 2's average (its transport's Progress() blocks on
// a store key) until ranks 0-2 have finished. As documented, rank 2 (its
// partner in round 2) gets the ring's kDeadlineExceeded naming rank 3 and
// the message it owed, skips that round's average and goes on; rank 1
// finds rank 3 missing from round 3's group and goes on alone; ranks 0-2
// finish every step, Finish() within its bound, with nothing posted still
// in flight and values inside the initial range; rank 3, thawed, fails its
// round and finishes too.
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "ATen/ops/full.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/moshpit/moshpit_strategy.h"
#include "strategies/testing/slow_peer_transport.h"
#include "strategies/testing/toy_problem.h"

namespace rdmaflow::strategies::moshpit {
namespace {

using ::rdmaflow::strategies::testing::SlowPeerTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kRanks = 4, kSteps = 4, kSlow = 3, kFreezeRound = 2;
// A round's all-reduce gives up after 1 s; a group waits 3 s for its
// members, long enough for rank 2 to come to round 3 after its failed
// round 2, so the groups are the same in every run.
constexpr int kRoundTimeoutMs = 1000, kGroupTimeoutMs = 3000;

TEST(MoshpitSlowPeerTest, APeerFrozenInItsAverageIsNamedAndSkipped) {
  at::set_num_threads(1);
  std::vector<std::vector<int>> sizes(kRanks);
  std::vector<int> failed(kRanks, -1);
  std::vector<std::vector<absl::Status>> errors(kRanks);
  std::vector<int64_t> steps(kRanks, 0), in_flight(kRanks, -1);
  std::vector<absl::Duration> finish_time(kRanks);
  std::vector<at::Tensor> final(kRanks);
  std::vector<absl::Status> status = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        SlowPeerTransport slow(transport);
        bool armed = false, frozen = false;
        absl::Status thawed;
        if (rank == kSlow) {
          slow.SetBeforeProgress([&] {
            if (!armed || frozen) return;
            frozen = true;
            thawed = store.Wait({"test/finished/0", "test/finished/1", "test/finished/2"},
                                absl::Seconds(60));
          });
        }
        ASSIGN_OR_RETURN(auto strategy,
                         MoshpitStrategy::Create(testing::ToyOptions(
                             kSteps, {{"side", "2"},
                                      {"round_timeout_ms", absl::StrCat(kRoundTimeoutMs)},
                                      {"group_timeout_ms", absl::StrCat(kGroupTimeoutMs)}})));
        std::vector<Parameter> p = {{"w", at::full({64}, 10.0f * rank)}};
        RETURN_IF_ERROR(strategy->Prepare({rank, kRanks, &slow, &store}, p).status());
        RETURN_IF_ERROR(strategy->Start());
        ComputeFn nothing = [&]() -> absl::StatusOr<ComputeResult> {
          // The exchange of this step is round `steps[rank]`.
          armed = rank == kSlow && steps[rank] == kFreezeRound;
          return ComputeResult{};
        };
        while (!strategy->done()) {
          RETURN_IF_ERROR(strategy->Step(nothing).status());
          ++steps[rank];
        }
        RETURN_IF_ERROR(thawed);
        const absl::Time begin = absl::Now();
        RETURN_IF_ERROR(strategy->Finish());
        finish_time[rank] = absl::Now() - begin;
        in_flight[rank] = 0;
        for (int peer = 0; peer < kRanks; ++peer) in_flight[rank] += slow.outstanding(peer);
        sizes[rank] = strategy->group_sizes();
        failed[rank] = strategy->failed_rounds();
        errors[rank] = strategy->round_errors();
        final[rank] = p[0].tensor.detach().clone();
        strategy.reset();
        if (rank != kSlow) {
          RETURN_IF_ERROR(store.Set(absl::StrCat("test/finished/", rank), "1"));
        }
        return absl::OkStatus();
      });
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_OK(status[r]);
    EXPECT_EQ(steps[r], kSteps);
    EXPECT_EQ(in_flight[r], 0);
    // Finish() waits at most the group timeout for each of its (at most d)
    // kept rings.
    EXPECT_LT(finish_time[r], absl::Milliseconds(2 * kGroupTimeoutMs) + absl::Seconds(5));
    EXPECT_GE(final[r].min().item<float>(), 0.0f);
    EXPECT_LE(final[r].max().item<float>(), 30.0f);
  }
  // Rank 2 waited for rank 3 in round 2 (group {2, 3}), named it, went on.
  ASSERT_EQ(failed[2], 1);
  EXPECT_THAT(errors[2][0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                     AllOf(HasSubstr("all-reduce 'avg' on rank 2"),
                                           HasSubstr("from rank 3"))));
  EXPECT_EQ(sizes[2], (std::vector<int>{2, 2, 2, 2}));
  // Rank 1 found rank 3 missing from round 3's group {1, 3}.
  EXPECT_EQ(sizes[1], (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(failed[1], 0);
  EXPECT_EQ(failed[0], 0);
  EXPECT_EQ(sizes[0], (std::vector<int>{2, 2, 2, 2}));
  // Rank 3's round 2 failed once it thawed (its partner had given up).
  EXPECT_EQ(failed[kSlow], 1);
}

}  // namespace
}  // namespace rdmaflow::strategies::moshpit
