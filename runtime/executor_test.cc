// Tests of the zero-copy executor over the loopback transport, ranks as
// threads: byte-exact delivery of every example graph, views on the static
// path, flow control under a slow receiver, dynamic sizes, promotion after
// tracing, bad input, and a dead receiver.
#include "runtime/executor.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "runtime/replay.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::testing::HasSubstr;
using ::rdmaflow::testing::StatusIs;
using ::testing::SizeIs;

constexpr int kSteps = 6;

// Rank 0 produces `x` of `shape`; rank 1 consumes it.
plan::TransferPlan OneTensorPlan(std::vector<int64_t> shape, int depth = 2) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, std::move(shape));
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  graph::PlannerOptions options;
  options.pipeline_depth = depth;
  absl::StatusOr<plan::TransferPlan> plan =
      graph::PlanGraph(std::move(b).Build(), options);
  EXPECT_OK(plan.status());
  return *plan;
}

CommunicatorOptions NoTracing(const std::string& ns = "t") {
  CommunicatorOptions options;
  options.ns = ns;
  options.trace_steps = 0;
  options.timeout = absl::Seconds(30);
  return options;
}

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_OK(results[rank]) << "rank " << rank;
  }
}

// Replays `steps` of `plan` on every rank; `check` sees each rank's executor
// at the end.
std::vector<absl::Status> Replay(
    const plan::TransferPlan& plan, const CommunicatorOptions& options,
    ReplayOptions replay, int steps,
    const std::function<void(int, Executor&)>& check = nullptr) {
  return rdma::testing::RunRankThreads(
      plan.world_size(),
      [&](int rank, rdma::Transport& transport,
          rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, options));
        ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, replay));
        for (int step = 0; step < steps; ++step) {
          RETURN_IF_ERROR(replayer->RunStep(*executor, step).status());
        }
        RETURN_IF_ERROR(executor->Shutdown());
        if (check) check(rank, *executor);
        return absl::OkStatus();
      });
}

TEST(ExecutorTest, EveryExampleGraphArrivesByteExact) {
  for (const graph::examples::NamedGraph& example : graph::examples::AllExamples()) {
    SCOPED_TRACE(example.file);
    ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                         graph::PlanGraph(example.graph, {}));
    ReplayOptions replay;
    replay.dynamic_dim = [](const TransferInfo& info, int64_t step, int d) {
      return 1 + (step * 5 + info.id + d) % 13;  // changes every step
    };
    std::vector<TransferCounters> counters(plan.world_size());
    ExpectAllOk(Replay(plan, NoTracing(), replay, kSteps,
                       [&](int rank, Executor& executor) {
                         counters[rank] = executor.counters();
                       }));
    int64_t sent = 0, received = 0, bytes_sent = 0, bytes_received = 0;
    for (const TransferCounters& c : counters) {
      EXPECT_EQ(c.steps, kSteps);
      sent += c.tensors_sent;
      received += c.tensors_received;
      bytes_sent += c.bytes_sent;
      bytes_received += c.bytes_received;
    }
    int transfers = 0;
    for (const auto& link : plan.link()) transfers += link.slot_size();
    EXPECT_EQ(sent, transfers * kSteps);
    EXPECT_EQ(received, sent);
    EXPECT_EQ(bytes_received, bytes_sent);
  }
}

TEST(ExecutorTest, PipelineDepthOneAndDeepPipelinesDeliver) {
  for (int depth : {1, 3, 16}) {
    SCOPED_TRACE(absl::StrCat("depth ", depth));
    graph::PlannerOptions options;
    options.pipeline_depth = depth;
    ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                         graph::PlanGraph(graph::examples::CnnLayerSeparated(), options));
    ExpectAllOk(Replay(plan, NoTracing(), {}, 2 * depth + 3));
  }
}

TEST(ExecutorTest, StaticTensorsAreViewsOfTheSlotAndArenaSendsAreNotCopied) {
  const plan::TransferPlan plan = OneTensorPlan({64, 256});
  const plan::LinkRegion& link = plan.link(0);
  const int id = link.slot(0).id();
  const uint64_t bytes = 64 * 256 * 4;
  std::vector<const std::byte*> received(4);
  TransferCounters counters[2];
  ExpectAllOk(rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, NoTracing()));
        ASSIGN_OR_RETURN(rdma::MemoryRegion arena,
                         transport.Allocate(4 * bytes));
        executor->AddSendArena(&arena);
        for (int step = 0; step < 4; ++step) {
          if (rank == 0) {
            std::byte* data = arena.data() + step * bytes;
            FillPattern(7, id, step, data, bytes);
            RETURN_IF_ERROR(
                executor->Send(id, {data, bytes, {64, 256}, nullptr}));
          } else {
            ASSIGN_OR_RETURN(ReceivedTensor t, executor->Recv(id));
            if (FindMismatch(7, id, step, t.data(), t.bytes()) >= 0) {
              return absl::DataLossError("corrupt");
            }
            received[step] = t.data();
          }
          RETURN_IF_ERROR(executor->FinishStep());
        }
        RETURN_IF_ERROR(executor->Shutdown());
        counters[rank] = executor->counters();
        return absl::OkStatus();
      }));
  // Step t is a view of stage t % 2 of the slot.
  EXPECT_EQ(received[1] - received[0],
            static_cast<ptrdiff_t>(link.stage_bytes()));
  EXPECT_EQ(received[2], received[0]);
  EXPECT_EQ(received[3], received[1]);
  EXPECT_EQ(counters[0].copies, 0);
  EXPECT_EQ(counters[1].copies, 0);
  EXPECT_EQ(counters[0].bytes_sent, 4 * static_cast<int64_t>(bytes));
}

// A tensor of a send arena is read in place until its write completes: its
// keepalive lives until then, and WaitSendsDone returns only once it went,
// so the caller may write the arena again (the next step's bytes over it).
TEST(ExecutorTest, WaitSendsDoneReturnsOnceNoWriteReadsTheCallersMemory) {
  const plan::TransferPlan plan = OneTensorPlan({64, 256});
  const int id = plan.link(0).slot(0).id();
  const uint64_t bytes = 64 * 256 * 4;
  ExpectAllOk(rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        // The arena first: it must outlive the executor.
        ASSIGN_OR_RETURN(rdma::MemoryRegion arena, transport.Allocate(bytes));
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, NoTracing()));
        executor->AddSendArena(&arena);
        for (int step = 0; step < 3; ++step) {
          if (rank == 0) {
            FillPattern(9, id, step, arena.data(), bytes);
            auto held = std::make_shared<int>(step);
            std::weak_ptr<int> watched = held;
            RETURN_IF_ERROR(
                executor->Send(id, {arena.data(), bytes, {64, 256}, std::move(held)}));
            RETURN_IF_ERROR(executor->WaitSendsDone());
            if (!watched.expired()) {
              return absl::InternalError(absl::StrCat(
                  "WaitSendsDone returned at step ", step,
                  " while the write still held its tensor"));
            }
          } else {
            ASSIGN_OR_RETURN(ReceivedTensor t, executor->Recv(id));
            if (FindMismatch(9, id, step, t.data(), t.bytes()) >= 0) {
              return absl::DataLossError(absl::StrCat(
                  "step ", step, " arrived corrupt: the arena rewritten under its write?"));
            }
          }
          RETURN_IF_ERROR(executor->FinishStep());
        }
        if (rank == 0 && executor->counters().copies != 0) {
          return absl::InternalError("the arena's tensors were staged, not written in place");
        }
        return executor->Shutdown();
      }));
}

TEST(ExecutorTest, WritesAChromeTraceOfEveryTransfer) {
  const plan::TransferPlan plan = OneTensorPlan({256});
  std::vector<size_t> events(2);
  ExpectAllOk(rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options = NoTracing();
        options.trace_path =
            absl::StrCat(::testing::TempDir(), "/trace.rank", rank, ".json");
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, options));
        ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, {}));
        for (int step = 0; step < 3; ++step) {
          RETURN_IF_ERROR(replayer->RunStep(*executor, step).status());
        }
        RETURN_IF_ERROR(executor->Shutdown());
        events[rank] = executor->trace().size();
        return absl::OkStatus();
      }));
  EXPECT_GE(events[0], 3u);  // a send event per step (and slot waits)
  EXPECT_EQ(events[1], 3u);  // a receive event per step
}

TEST(ExecutorTest, HeapTensorsAreCopiedOnceIntoStaging) {
  const plan::TransferPlan plan = OneTensorPlan({1000});
  TransferCounters sender;
  ExpectAllOk(Replay(plan, NoTracing(), {}, kSteps,
                     [&](int rank, Executor& executor) {
                       if (rank == 0) sender = executor.counters();
                     }));
  EXPECT_EQ(sender.copies, kSteps);
  EXPECT_EQ(sender.bytes_copied, kSteps * 4000);
}

// Sends step `step` of `id` from a heap buffer of `elements` floats.
absl::Status SendPattern(Executor& executor, int id, int64_t step,
                         int64_t elements) {
  std::vector<std::byte> data(elements * 4);
  FillPattern(1, id, step, data.data(), data.size());
  return executor.Send(id, {data.data(), data.size(), {elements}, nullptr});
}

TEST(ExecutorTest, SlowReceiverHoldsTheSenderBackAndNothingIsOverwritten) {
  const plan::TransferPlan plan = OneTensorPlan({4096}, /*depth=*/2);
  const int id = plan.link(0).slot(0).id();
  absl::Notification holding, sender_refused, dropped;
  absl::Status refused;
  ExpectAllOk(rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options = NoTracing();
        // The sender's wait for a held slot gives up quickly.
        if (rank == 0) options.timeout = absl::Seconds(1);
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, options));
        if (rank == 0) {
          for (int step = 0; step < 2; ++step) {  // fills both stages
            RETURN_IF_ERROR(SendPattern(*executor, id, step, 4096));
            RETURN_IF_ERROR(executor->FinishStep());
          }
          holding.WaitForNotification();
          // Step 2 needs stage 0, which holds step 0.
          refused = SendPattern(*executor, id, 2, 4096);
          sender_refused.Notify();
          dropped.WaitForNotification();
          RETURN_IF_ERROR(SendPattern(*executor, id, 2, 4096));
          RETURN_IF_ERROR(executor->FinishStep());
          return executor->Shutdown();
        }
        ASSIGN_OR_RETURN(ReceivedTensor t0, executor->Recv(id));
        RETURN_IF_ERROR(executor->FinishStep());
        ASSIGN_OR_RETURN(ReceivedTensor t1, executor->Recv(id));
        RETURN_IF_ERROR(executor->FinishStep());
        holding.Notify();
        sender_refused.WaitForNotification();
        if (FindMismatch(1, id, 0, t0.data(), t0.bytes()) >= 0 ||
            FindMismatch(1, id, 1, t1.data(), t1.bytes()) >= 0) {
          return absl::DataLossError("a held tensor was overwritten");
        }
        t0 = ReceivedTensor();
        t1 = ReceivedTensor();
        dropped.Notify();
        ASSIGN_OR_RETURN(ReceivedTensor t2, executor->Recv(id));
        if (FindMismatch(1, id, 2, t2.data(), t2.bytes()) >= 0) {
          return absl::DataLossError("step 2 arrived corrupt");
        }
        t2 = ReceivedTensor();
        RETURN_IF_ERROR(executor->FinishStep());
        return executor->Shutdown();
      }));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                HasSubstr("rank 1 still holds step 0")));
}

TEST(ExecutorTest, DynamicTensorsOfChangingSizesArePulled) {
  ASSERT_OK_AND_ASSIGN(
      plan::TransferPlan plan,
      graph::PlanGraph(graph::examples::SequenceDynamicLength(), {}));
  ReplayOptions replay;
  replay.dynamic_dim = [](const TransferInfo&, int64_t step, int) {
    return 3 + step * 11;
  };
  std::vector<TransferCounters> counters(plan.world_size());
  ExpectAllOk(Replay(plan, NoTracing(), replay, 8, [&](int rank, Executor& e) {
    counters[rank] = e.counters();
  }));
  int dynamic_recv = 0;
  for (const auto& link : plan.link()) {
    for (const auto& slot : link.slot()) {
      dynamic_recv += slot.kind() == plan::DYNAMIC;
    }
  }
  ASSERT_GT(dynamic_recv, 0);
  int64_t reads = 0;
  for (const auto& c : counters) reads += c.reads;
  EXPECT_EQ(reads, 8 * dynamic_recv);
}

TEST(ExecutorTest, StableDynamicTensorsArePromotedAfterTracing) {
  ASSERT_OK_AND_ASSIGN(
      plan::TransferPlan plan,
      graph::PlanGraph(graph::examples::SequenceDynamicLength(), {}));
  CommunicatorOptions options = NoTracing();
  options.trace_steps = 2;
  std::vector<TransferCounters> counters(plan.world_size());
  std::vector<std::vector<std::string>> promoted(plan.world_size());
  std::vector<plan::TransferPlan> final_plan(plan.world_size());
  ExpectAllOk(Replay(plan, options, {}, 7, [&](int rank, Executor& e) {
    counters[rank] = e.counters();
    promoted[rank] = e.promoted();
    final_plan[rank] = e.plan();
  }));
  int dynamic_recv = 0;
  for (const auto& link : plan.link()) {
    for (const auto& slot : link.slot()) {
      dynamic_recv += slot.kind() == plan::DYNAMIC;
    }
  }
  ASSERT_GT(dynamic_recv, 0);
  int64_t reads = 0;
  for (const auto& c : counters) reads += c.reads;
  // Pulled during the two traced steps only; static afterwards.
  EXPECT_EQ(reads, 2 * dynamic_recv);
  EXPECT_THAT(promoted[0], SizeIs(::testing::Gt(0)));
  for (const auto& link : final_plan[0].link()) {
    for (const auto& slot : link.slot()) EXPECT_EQ(slot.kind(), plan::STATIC);
  }
}

TEST(ExecutorTest, BadCallsGetClearErrors) {
  const plan::TransferPlan plan = OneTensorPlan({16});
  const int id = plan.link(0).slot(0).id();
  std::vector<absl::Status> checks;
  ExpectAllOk(rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, NoTracing()));
        if (rank == 1) {
          EXPECT_THAT(executor->Send(id, {}),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("rank 0 sends it")));
          EXPECT_THAT(executor->Recv(id + 100).status(),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("no transfer with id")));
          EXPECT_THAT(executor->FinishStep(),
                      StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("never received")));
          ASSIGN_OR_RETURN(ReceivedTensor t, executor->Recv(id));
          EXPECT_EQ(t.bytes(), 64u);
          RETURN_IF_ERROR(executor->FinishStep());
          return executor->Shutdown();
        }
        std::vector<std::byte> data(64);
        EXPECT_THAT(executor->Send(id, {data.data(), 60, {15}, nullptr}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("expects float32[16]")));
        EXPECT_THAT(executor->Send(id, {data.data(), 60, {16}, nullptr}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("which needs 64")));
        RETURN_IF_ERROR(executor->Send(id, {data.data(), 64, {16}, nullptr}));
        EXPECT_THAT(executor->Send(id, {data.data(), 64, {16}, nullptr}),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             HasSubstr("already sent in step 0")));
        RETURN_IF_ERROR(executor->FinishStep());
        RETURN_IF_ERROR(executor->Shutdown());
        EXPECT_THAT(executor->Send(id, {data.data(), 64, {16}, nullptr}),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             HasSubstr("shut down")));
        return absl::OkStatus();
      }));
}

TEST(ExecutorTest, PlanForAnotherWorldIsRejected) {
  const plan::TransferPlan plan = OneTensorPlan({16});
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      3, [&](int, rdma::Transport& transport, rdma::Store& store) {
        return Executor::Create(plan, transport, store, NoTracing()).status();
      });
  EXPECT_THAT(results[2], StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("outside the plan's world")));
}

TEST(ExecutorTest, DeadReceiverGivesTheSenderAnErrorNotAHang) {
  const plan::TransferPlan plan = OneTensorPlan({1024}, /*depth=*/1);
  const int id = plan.link(0).slot(0).id();
  absl::Notification receiver_gone;
  absl::Status sender_status;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto executor,
                         Executor::Create(plan, transport, store, NoTracing()));
        if (rank == 1) {
          // Receive step 0 and keep it, then vanish with the transport.
          ASSIGN_OR_RETURN(ReceivedTensor t, executor->Recv(id));
          executor.release();  // the process "dies": no shutdown, no credit
          receiver_gone.Notify();
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(SendPattern(*executor, id, 0, 1024));
        RETURN_IF_ERROR(executor->FinishStep());
        receiver_gone.WaitForNotification();
        sender_status = SendPattern(*executor, id, 1, 1024);
        executor->Shutdown().IgnoreError();
        return absl::OkStatus();
      });
  // The error names the dead peer and the tensor the sender waited on.
  EXPECT_THAT(sender_status,
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::AllOf(HasSubstr("rank 1"),
                                        HasSubstr("tensor 'x:0'"))));
}

}  // namespace
}  // namespace rdmaflow::runtime
