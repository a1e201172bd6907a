// LibTorch tensors through the zero-copy executor: computed straight into
// registered memory on the sender (no copy), received as views of the slot
// that return it to the sender when dropped.
#include "ATen/ops/equal.h"
#include "ATen/ops/full.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/zeros.h"
#include "runtime/torch/torch_communicator.h"

#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "rdma/testing/rank_threads.h"
#include "runtime/torch/registered_allocator.h"

namespace rdmaflow::runtime::torch {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// Rank 0 computes y = a @ b (64 x 32) and sends it to rank 1.
plan::TransferPlan MatmulPlan() {
  graph::GraphBuilder b("matmul");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string y = b.Placeholder("y", graph::DT_FLOAT32, {64, 32});
  b.SetRank(1);
  b.Op("z", "Relu", {y});
  return *graph::PlanGraph(std::move(b).Build(), {});
}

TEST(TorchCommunicatorTest, RegisteredTensorsGoOutUncopiedAndArriveAsViews) {
  const plan::TransferPlan plan = MatmulPlan();
  const int id = plan.link(0).slot(0).id();
  constexpr int kSteps = 5;
  std::vector<const void*> received(kSteps);
  TransferCounters counters[2];
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.trace_steps = 0;
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, options));
        ASSIGN_OR_RETURN(auto allocator,
                         RegisteredAllocator::Create(transport, 1 << 20));
        executor->AddSendArena(&allocator->region());
        ASSIGN_OR_RETURN(TorchCommunicator torch,
                         TorchCommunicator::Create(*executor, plan, rank));
        for (int step = 0; step < kSteps; ++step) {
          at::Tensor a = at::full({64, 16}, step + 1.0f);
          at::Tensor b = at::ones({16, 32});
          if (rank == 0) {
            ASSIGN_OR_RETURN(at::Tensor y, allocator->Empty({64, 32}, at::kFloat));
            at::matmul_out(y, a, b);  // produced in registered memory
            RETURN_IF_ERROR(torch.Send(id, y));
          } else {
            ASSIGN_OR_RETURN(at::Tensor y, torch.Recv(id));
            if (!at::equal(y, at::matmul(a, b))) {
              return absl::DataLossError("wrong values");
            }
            received[step] = y.data_ptr();
          }  // y dropped here: the slot goes back to the sender
          RETURN_IF_ERROR(torch.FinishStep());
        }
        EXPECT_EQ(allocator->fallbacks(), 0);
        RETURN_IF_ERROR(executor->Shutdown());
        counters[rank] = executor->counters();
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_EQ(counters[0].copies, 0);
  EXPECT_EQ(counters[1].copies, 0);
  // Views of the slot's two stages, alternating.
  EXPECT_NE(received[0], received[1]);
  EXPECT_EQ(received[2], received[0]);
  EXPECT_EQ(received[3], received[1]);
}

TEST(TorchCommunicatorTest, WrongDtypeIsRejected) {
  const plan::TransferPlan plan = MatmulPlan();
  const int id = plan.link(0).slot(0).id();
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.trace_steps = 0;
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, options));
        ASSIGN_OR_RETURN(TorchCommunicator torch,
                         TorchCommunicator::Create(*executor, plan, rank));
        if (rank == 0) {
          EXPECT_THAT(torch.Send(id, at::zeros({64, 32}, at::kDouble)),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("expects a CPU Float")));
          // A non-contiguous float tensor is fine (made contiguous).
          RETURN_IF_ERROR(torch.Send(id, at::ones({32, 64}).t()));
        } else {
          ASSIGN_OR_RETURN(at::Tensor y, torch.Recv(id));
          EXPECT_TRUE(at::equal(y, at::ones({64, 32})));
        }
        RETURN_IF_ERROR(torch.FinishStep());
        return executor->Shutdown();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::runtime::torch
