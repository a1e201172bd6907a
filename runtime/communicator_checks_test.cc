// The argument checks the three communicators share: each refusal names the
// tensor, its id and the peer, with the code communicator.h lists.
#include "runtime/communicator_checks.h"

#include <cstddef>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Rank 0 sends float32 `shape` to rank 1.
RankPlan OneTensor(std::vector<int64_t> shape, int rank) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, std::move(shape));
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_OK(plan.status());
  absl::StatusOr<RankPlan> mine = RankPlan::Create(*plan, rank);
  EXPECT_OK(mine.status());
  return *std::move(mine);
}

TEST(CommunicatorChecksTest, ACallAfterShutdownNamesTheRank) {
  EXPECT_OK(CheckNotShutDown(false, 3));
  EXPECT_THAT(CheckNotShutDown(true, 3),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("rank 3"), HasSubstr("shut down"))));
}

TEST(CommunicatorChecksTest, SendArgumentsAreCheckedAgainstThePlan) {
  const RankPlan sender = OneTensor({16}, 0);
  const RankPlan receiver = OneTensor({16}, 1);
  const int id = sender.sends().front().id;
  std::vector<std::byte> data(64);
  ASSERT_OK_AND_ASSIGN(SendArguments args,
                       CheckSendArguments(sender, id, {data.data(), 64, {16}, nullptr}, 1024));
  EXPECT_EQ(args.info->id, id);
  EXPECT_EQ(args.bytes, 64u);
  EXPECT_THAT(CheckSendArguments(sender, 9999, {}, 1024).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no transfer with id 9999")));
  EXPECT_THAT(CheckSendArguments(receiver, id, {}, 1024).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0 sends it")));
  EXPECT_THAT(CheckSendArguments(sender, id, {data.data(), 60, {15}, nullptr}, 1024).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expects float32[16]")));
  EXPECT_THAT(CheckSendArguments(sender, id, {data.data(), 60, {16}, nullptr}, 1024).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("got 60 bytes for shape [16] of float32"),
                             HasSubstr("which needs 64"))));
  EXPECT_THAT(CheckSendArguments(sender, id, {nullptr, 64, {16}, nullptr}, 1024).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null data")));
}

TEST(CommunicatorChecksTest, ADynamicTensorMustFitThePool) {
  const RankPlan sender = OneTensor({-1, -1}, 0);
  const int id = sender.sends().front().id;
  std::vector<std::byte> data(4 * 64);
  EXPECT_OK(CheckSendArguments(sender, id, {data.data(), 256, {8, 8}, nullptr}, 256).status());
  EXPECT_THAT(CheckSendArguments(sender, id, {data.data(), 256, {8, 8}, nullptr}, 255).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("256 bytes exceed the dynamic pool of 255"),
                             HasSubstr("dynamic_pool_bytes"))));
}

TEST(CommunicatorChecksTest, AnArrivedTensorIsCheckedAndItsSenderNamed) {
  const RankPlan fixed = OneTensor({40}, 1);
  const TransferInfo& info = fixed.recvs().front();
  EXPECT_THAT(CheckArrivedTensor(info, 0, {40}, 160, 0), testing::IsOkAndHolds(160u));
  EXPECT_THAT(CheckArrivedTensor(info, 0, {41}, 164, 1024),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank 0 sent"), HasSubstr("expects float32[40]"))));
  EXPECT_THAT(CheckArrivedTensor(info, 0, {40}, 100, 1024),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank 0"),
                             HasSubstr("message of 100 bytes for shape of 160"))));
  const RankPlan dynamic = OneTensor({-1, -1}, 1);
  const TransferInfo& any = dynamic.recvs().front();
  EXPECT_THAT(CheckArrivedTensor(any, 0, {-2, -3}, 24, 1024),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("got shape")));
  EXPECT_THAT(CheckArrivedTensor(any, 0, {1024, 1024}, 4 << 20, 1 << 20),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than dynamic_pool_bytes")));
  EXPECT_THAT(CheckArrivedTensor(any, 0, {int64_t{1} << 30, int64_t{1} << 30}, uint64_t{1} << 62,
                                 1 << 20),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^50 elements")));
}

}  // namespace
}  // namespace rdmaflow::runtime
