// The executor over device slots (docs/device.md, "Device slots"): each
// rank a DeviceTransport over the loopback with a fake device of its own
// (ranks on different "hosts", so writes are staged), a link with host and
// device slots. A tensor held in device memory goes from a send arena into
// the peer's device slot, a host tensor into a device slot or a host one;
// what the executor cannot move is refused by name.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "rdma/device/device_transport.h"
#include "rdma/testing/rank_threads.h"
#include "runtime/executor.h"
#include "runtime/replay.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kSteps = 4;
constexpr int64_t kRows = 32;
constexpr int64_t kCols = 64;
constexpr size_t kBytes = kRows * kCols * sizeof(float);

// Rank 0 holds `a` on the device and `w`, `h` in host memory; rank 1 reads
// `a` and `w` on the device, `h` on the host.
plan::TransferPlan MixedPlan() {
  graph::GraphBuilder b("device_slots");
  b.SetWorldSize(2);
  b.SetMemory(graph::MEMORY_DEVICE);
  std::string a = b.Placeholder("a", graph::DT_FLOAT32, {kRows, kCols});
  b.SetMemory(graph::MEMORY_HOST);
  std::string w = b.Placeholder("w", graph::DT_FLOAT32, {kRows, kCols});
  std::string h = b.Placeholder("h", graph::DT_FLOAT32, {kRows, kCols});
  b.SetRank(1);
  b.SetMemory(graph::MEMORY_DEVICE);
  b.Op("ya", "Relu", {a});
  b.Op("yw", "Relu", {w});
  b.SetMemory(graph::MEMORY_HOST);
  b.Op("yh", "Relu", {h});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_THAT(plan.status(), ::rdmaflow::testing::IsOk());
  return *plan;
}

CommunicatorOptions Options(absl::Duration timeout = absl::Seconds(30)) {
  CommunicatorOptions options;
  options.ns = "device";
  options.trace_steps = 0;
  options.timeout = timeout;
  return options;
}

// Element i of tensor `salt` at `step`.
float Value(int salt, int step, size_t i) {
  return static_cast<float>(salt * 1000 + step * 7 + static_cast<int>(i % 997));
}

// How many of the `kBytes` at `data` differ from tensor `salt` at `step`
// (the fake device's memory is host memory: readable here).
size_t Wrong(const std::byte* data, int salt, int step) {
  std::vector<float> got(kBytes / sizeof(float));
  std::memcpy(got.data(), data, kBytes);
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != Value(salt, step, i);
  return wrong;
}

// Runs `body` on 2 ranks, each with a device transport over its loopback
// transport and a fake device of its own, on a "host" of its own (so
// device writes are staged).
std::vector<absl::Status> RunOnDevices(
    const std::function<absl::Status(int, rdma::Transport&, rdma::Store&)>& body) {
  return rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& host,
             rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<device::FakeDevice> device,
                         device::FakeDevice::Create(device::FakeDeviceOptions{}));
        rdma::device_path::DeviceTransportOptions options;
        options.host_identity = absl::StrCat("executor-host-", rank);
        options.staging.slots = 4;
        options.staging.slot_bytes = 4096;
        options.staging.directory_ranks = 4;
        ASSIGN_OR_RETURN(
            auto transport,
            rdma::device_path::DeviceTransport::Create(std::move(host), device.get(), options));
        return body(rank, *transport, store);
      });
}

// A host tensor of `salt` at `step`, kept alive by the executor.
OutgoingTensor HostTensor(int salt, int step) {
  auto values = std::make_shared<std::vector<float>>(kBytes / sizeof(float));
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = Value(salt, step, i);
  OutgoingTensor out;
  out.data = reinterpret_cast<const std::byte*>(values->data());
  out.bytes = kBytes;
  out.shape = {kRows, kCols};
  out.keepalive = values;
  return out;
}

absl::Status RunSender(const plan::TransferPlan& plan, rdma::Transport& transport,
                       rdma::Store& store) {
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, 0));
  ASSIGN_OR_RETURN(const int a, rank_plan.IdOf(true, "a:0", 1));
  ASSIGN_OR_RETURN(const int w, rank_plan.IdOf(true, "w:0", 1));
  ASSIGN_OR_RETURN(const int h, rank_plan.IdOf(true, "h:0", 1));
  // `a` is produced in device memory, a tensor of its own each step.
  ASSIGN_OR_RETURN(rdma::MemoryRegion arena, transport.AllocateDevice(kSteps * kBytes));
  ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
  executor->AddSendArena(&arena);
  for (int step = 0; step < kSteps; ++step) {
    std::byte* at = arena.data() + step * kBytes;
    OutgoingTensor produced = HostTensor(1, step);
    std::memcpy(at, produced.data, kBytes);  // the fake device's memory is host memory
    RETURN_IF_ERROR(executor->Send(a, {at, kBytes, {kRows, kCols}, nullptr}));
    RETURN_IF_ERROR(executor->Send(w, HostTensor(2, step)));
    RETURN_IF_ERROR(executor->Send(h, HostTensor(3, step)));
    RETURN_IF_ERROR(executor->FinishStep());
  }
  const TransferCounters counters = executor->counters();
  RETURN_IF_ERROR(executor->Shutdown());
  // `a` went from its arena in place; `w` and `h` were copied once each.
  if (counters.copies != 2 * kSteps) {
    return absl::InternalError(absl::StrCat(counters.copies, " copies, not ", 2 * kSteps));
  }
  return absl::OkStatus();
}

absl::Status RunReceiver(const plan::TransferPlan& plan, rdma::Transport& transport,
                         rdma::Store& store) {
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, 1));
  ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
  for (int step = 0; step < kSteps; ++step) {
    // All three are held until the last arrives, as an op reading them
    // together would: a slot of one region must not wait for the release
    // of a slot of the other (they share no memory).
    std::vector<ReceivedTensor> held;
    for (const auto& [tensor, salt, on_device] :
         {std::tuple<const char*, int, bool>{"a:0", 1, true}, {"w:0", 2, true},
          {"h:0", 3, false}}) {
      ASSIGN_OR_RETURN(const int id, rank_plan.IdOf(false, tensor, 0));
      ASSIGN_OR_RETURN(ReceivedTensor received, executor->Recv(id));
      if (received.on_device() != on_device || received.bytes() != kBytes) {
        return absl::InternalError(absl::StrCat(tensor, " arrived with on_device ",
                                                received.on_device(), ", ", received.bytes(),
                                                " bytes"));
      }
      if (const size_t wrong = Wrong(received.data(), salt, step); wrong != 0) {
        return absl::DataLossError(
            absl::StrCat(tensor, " at step ", step, ": ", wrong, " wrong elements"));
      }
      held.push_back(std::move(received));
    }
    held.clear();
    RETURN_IF_ERROR(executor->FinishStep());
  }
  return executor->Shutdown();
}

TEST(ExecutorDeviceTest, DeviceAndHostSlotsDeliverEveryByte) {
  const plan::TransferPlan plan = MixedPlan();
  ASSERT_EQ(plan.link_size(), 1);
  ASSERT_GT(plan.link(0).device_region_bytes(), 0u);
  ASSERT_GT(plan.link(0).region_bytes(), 0u);
  const std::vector<absl::Status> results =
      RunOnDevices([&](int rank, rdma::Transport& transport, rdma::Store& store) {
        return rank == 0 ? RunSender(plan, transport, store) : RunReceiver(plan, transport, store);
      });
  EXPECT_OK(results[0]) << "the sender";
  EXPECT_OK(results[1]) << "the receiver";
}

// Each rank's Executor::Create over plain loopback transports (no device),
// giving up on a peer after 2 s.
std::vector<absl::Status> CreateOnHostTransports(const plan::TransferPlan& plan) {
  return rdma::testing::RunRankThreads(
      plan.world_size(),
      [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        return Executor::Create(plan, transport, store, Options(absl::Seconds(2))).status();
      });
}

TEST(ExecutorDeviceTest, AHostTransportCannotReceiveDeviceSlots) {
  const plan::TransferPlan plan = MixedPlan();
  const std::vector<absl::Status> results = CreateOnHostTransports(plan);
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kUnimplemented,
                                   AllOf(HasSubstr("receives device slots from rank 0"),
                                         HasSubstr("device transport"))));
  // The sender never gets the device region: it gives up waiting, or finds
  // the receiver gone (whichever comes first).
  EXPECT_THAT(results[0], ::testing::AnyOf(StatusIs(absl::StatusCode::kDeadlineExceeded),
                                           StatusIs(absl::StatusCode::kUnavailable)));
}

TEST(ExecutorDeviceTest, DeviceMemoryOutsideAnArenaIsRefused) {
  const plan::TransferPlan plan = MixedPlan();
  const std::vector<absl::Status> results = RunOnDevices(
      [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
        absl::Status sent = absl::OkStatus();
        if (rank == 0) {
          ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, 0));
          ASSIGN_OR_RETURN(const int a, rank_plan.IdOf(true, "a:0", 1));
          sent = executor->Send(a, HostTensor(1, 0));
        }
        RETURN_IF_ERROR(executor->Shutdown());
        return sent;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("'a:0'"), HasSubstr("send arena"))));
  EXPECT_OK(results[1]);
}

TEST(ExecutorDeviceTest, CommunicatorsThatUseTheCpuRefuseDevicePlans) {
  const plan::TransferPlan plan = MixedPlan();
  for (int rank : {0, 1}) {
    EXPECT_THAT(Replayer::Create(plan, rank, {}),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("'a:0'"), HasSubstr("the replayer"))))
        << "rank " << rank;
    ASSERT_OK_AND_ASSIGN(RankPlan rank_plan, RankPlan::Create(plan, rank));
    EXPECT_THAT(CheckHostMemoryOnly(rank_plan, "the gRPC communicator"),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("the gRPC communicator moves host memory only")));
  }
  // A plan of host tensors only passes.
  graph::GraphBuilder b("host_only");
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, {4});
  b.SetRank(1);
  b.Op("y", "Relu", {x});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan host, graph::PlanGraph(std::move(b).Build(), {}));
  ASSERT_OK_AND_ASSIGN(RankPlan host_rank_plan, RankPlan::Create(host, 1));
  EXPECT_OK(CheckHostMemoryOnly(host_rank_plan, "the gRPC communicator"));
}

TEST(ExecutorDeviceTest, ADeviceTensorReadOnTheHostIsRefusedAtCreate) {
  graph::GraphBuilder b("device_to_host");
  b.SetWorldSize(2);
  b.SetMemory(graph::MEMORY_DEVICE);
  std::string a = b.Placeholder("a", graph::DT_FLOAT32, {4});
  b.SetRank(1);
  b.SetMemory(graph::MEMORY_HOST);
  b.Op("y", "Relu", {a});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, graph::PlanGraph(std::move(b).Build(), {}));
  const std::vector<absl::Status> results = CreateOnHostTransports(plan);
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("held in device memory on rank 0"),
                                         HasSubstr("read from host memory on rank 1"))));
  // The receiver says so too, before it waits for anything.
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("held in device memory on rank 0")));
}

}  // namespace
}  // namespace rdmaflow::runtime
