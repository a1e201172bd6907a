// LibTorch tensors through the zero-copy executor: computed straight into
// registered memory on the sender (no copy), received as views of the slot
// that return it to the sender when dropped; the plan's device tensors,
// over fake devices, from a send arena in device memory into device slots,
// and refused by an adapter made without a device.
#include "ATen/ops/equal.h"
#include "ATen/ops/full.h"
#include "ATen/ops/matmul.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/zeros.h"
#include "runtime/torch/torch_communicator.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "ATen/ops/arange.h"
#include "ATen/ops/from_blob.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "rdma/device/device_transport.h"
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
                               HasSubstr("expects a Float one on cpu")));
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

// Rank 0 holds `a` [8, 16] float32 on the device and `l` [8] int64 on the
// host; rank 1 reads both on the device.
plan::TransferPlan DevicePlan() {
  graph::GraphBuilder b("device_tensors");
  b.SetWorldSize(2);
  b.SetMemory(graph::MEMORY_DEVICE);
  std::string a = b.Placeholder("a", graph::DT_FLOAT32, {8, 16});
  b.SetMemory(graph::MEMORY_HOST);
  std::string l = b.Placeholder("l", graph::DT_INT64, {8});
  b.SetRank(1);
  b.SetMemory(graph::MEMORY_DEVICE);
  b.Op("ya", "Relu", {a});
  b.Op("yl", "Identity", {l});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_OK(plan.status());
  return *plan;
}

// Each rank a device transport over its loopback transport, with a fake
// device of its own on a "host" of its own; the fake device's memory is
// host memory, its tensors CPU tensors (what the strategies' device
// tensors are on it: strategies/device_tensors.h).
TEST(TorchCommunicatorTest, DeviceTensorsGoFromASendArenaIntoDeviceSlots) {
  const plan::TransferPlan plan = DevicePlan();
  constexpr int kSteps = 3;
  const c10::Device cpu(c10::kCPU);
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& host,
             rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<device::FakeDevice> device,
                         device::FakeDevice::Create(device::FakeDeviceOptions{}));
        rdma::device_path::DeviceTransportOptions options;
        options.host_identity = absl::StrCat("torch-host-", rank);
        ASSIGN_OR_RETURN(
            auto transport,
            rdma::device_path::DeviceTransport::Create(std::move(host), device.get(), options));
        CommunicatorOptions communication;
        communication.trace_steps = 0;
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, *transport, store, communication));
        ASSIGN_OR_RETURN(RankPlan mine, RankPlan::Create(plan, rank));
        ASSIGN_OR_RETURN(const int a, mine.IdOf(rank == 0, "a:0", 1 - rank));
        ASSIGN_OR_RETURN(const int l, mine.IdOf(rank == 0, "l:0", 1 - rank));
        // Made without a device, an adapter refuses the device tensors.
        ASSIGN_OR_RETURN(TorchCommunicator host_only,
                         TorchCommunicator::Create(*executor, plan, rank));
        EXPECT_THAT(rank == 0 ? host_only.Send(a, at::zeros({8, 16})) : host_only.Recv(a).status(),
                    StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("without a device")));
        ASSIGN_OR_RETURN(TorchCommunicator torch,
                         TorchCommunicator::Create(*executor, plan, rank, cpu));
        std::unique_ptr<rdma::MemoryRegion> arena;
        if (rank == 0) {
          ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                           transport->AllocateDevice(2 * 8 * 16 * sizeof(float)));
          arena = std::make_unique<rdma::MemoryRegion>(std::move(region));
          executor->AddSendArena(arena.get());
          const at::Tensor over = at::from_blob(arena->data(), {2, 8, 16}, at::kFloat);
          // Outside every arena, or not contiguous: refused by name.
          EXPECT_THAT(torch.Send(a, at::zeros({8, 16})),
                      StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("outside every send arena")));
          EXPECT_THAT(torch.Send(a, over[0].t()),
                      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not contiguous")));
          EXPECT_THAT(torch.Send(a, over[0].to(at::kDouble)),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("expects a Float one on cpu (held in device memory)")));
          for (int step = 0; step < kSteps; ++step) {
            // The arena's halves in turn; the last step's send is done
            // before its half is written again.
            RETURN_IF_ERROR(executor->WaitSendsDone());
            at::Tensor half = over[step % 2];
            half.copy_(at::arange(128, at::kFloat).reshape({8, 16}).add(100 * step));
            RETURN_IF_ERROR(torch.Send(a, half));
            RETURN_IF_ERROR(torch.Send(l, at::arange(8, at::kLong).add(step)));
            RETURN_IF_ERROR(torch.FinishStep());
          }
        } else {
          for (int step = 0; step < kSteps; ++step) {
            ASSIGN_OR_RETURN(at::Tensor got, torch.Recv(a));
            ASSIGN_OR_RETURN(at::Tensor labels, torch.Recv(l));
            EXPECT_EQ(got.device(), cpu);
            EXPECT_EQ(labels.scalar_type(), at::kLong);
            EXPECT_TRUE(at::equal(got, at::arange(128, at::kFloat).reshape({8, 16}).add(100 * step)))
                << "step " << step;
            EXPECT_TRUE(at::equal(labels, at::arange(8, at::kLong).add(step))) << "step " << step;
            got = at::Tensor();  // the slots go back
            labels = at::Tensor();
            RETURN_IF_ERROR(torch.FinishStep());
          }
        }
        RETURN_IF_ERROR(executor->Shutdown());
        if (rank == 0) {
          // The device tensor left from the arena, uncopied; the labels,
          // host memory into a device slot, were staged once each.
          EXPECT_EQ(executor->counters().copies, kSteps);
        }
        executor.reset();
        arena.reset();
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::runtime::torch
