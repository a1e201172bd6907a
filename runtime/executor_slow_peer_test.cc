// The zero-copy executor when a one-sided READ of a dynamic tensor does not
// complete: the sender's NIC or process stops answering (FaultyTransport
// kDrop: the completion fires only when the endpoint is closed), or, worse,
// not even closing the link brings the completion back (held by the test).
// Giving up must fence the READ before its destination is freed: the
// receive fails with kDeadlineExceeded naming the sender and the read, no
// memory the READ may still write is handed to another tensor or freed, the
// sender is not told that the undelivered tensor was released, and the
// executor stays failed. Also: a write whose completion comes back after
// its executor is gone.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "rdma/testing/faulty_transport.h"
#include "runtime/executor.h"
#include "runtime/replay.h"
#include "rdma/testing/rank_threads.h"
#include "rdma/testing/tracking_transport.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::rdma::testing::FaultyTransport;
using ::rdmaflow::rdma::testing::TrackingTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "executor_slow_peer_test";
constexpr int64_t kElements = 1024;  // 4 KiB: exactly the receiver's pool
constexpr size_t kBytes = kElements * 4;

plan::TransferPlan DynamicPlan() {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, {-1});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_OK(plan.status());
  return *plan;
}

CommunicatorOptions Options(absl::Duration timeout) {
  CommunicatorOptions options;
  options.ns = kNs;
  options.trace_steps = 0;
  options.timeout = timeout;
  // The receiver's pool holds one tensor: a freed range is reused at once.
  options.dynamic_pool_bytes = kBytes;
  return options;
}

struct Result {
  absl::Status first;   // the receive whose read never completes
  absl::Status second;  // a receive after it
  bool second_overlapped = false;
  absl::Status sender_step2;
  std::vector<std::string> violations;
  int64_t held_after_destruction = 0;
};

// Rank 0 sends steps 0 and 1 of a 4 KiB dynamic tensor; rank 1's first read
// is dropped by FaultyTransport (and, with `stuck`, its completion is held
// past Close until the executor is gone).
Result RunWithDroppedRead(bool stuck) {
  const plan::TransferPlan plan = DynamicPlan();
  const int id = plan.link(0).slot(0).id();
  const std::string judged = absl::StrCat(kNs, "/judged");
  const std::string sender_done = absl::StrCat(kNs, "/sender_done");
  Result result;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          CommunicatorOptions options = Options(absl::Seconds(1));
          options.dynamic_pool_bytes = 4 * kBytes;  // holds both steps
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, options));
          std::vector<std::byte> data(kBytes);
          for (int step = 0; step < 2; ++step) {
            FillPattern(3, id, step, data.data(), data.size());
            RETURN_IF_ERROR(executor->Send(id, {data.data(), kBytes, {kElements}, nullptr}));
            RETURN_IF_ERROR(executor->FinishStep());
          }
          RETURN_IF_ERROR(store.Wait({judged}, absl::Seconds(30)));
          // Step 2 needs stage 0, i.e. step 0 released: it never was.
          result.sender_step2 = executor->Send(id, {data.data(), kBytes, {kElements}, nullptr});
          executor.reset();
          return store.Set(sender_done, "1");
        }
        FaultyTransport faulty(transport);
        FaultyTransport::Fault drop;
        drop.op = FaultyTransport::Op::kRead;
        drop.peer = 0;
        drop.action = FaultyTransport::Action::kDrop;
        faulty.AddFault(drop);
        TrackingTransport tracking(faulty);
        if (stuck) tracking.hold_reads();
        {
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, tracking, store,
                                                           Options(absl::Seconds(1))));
          result.first = executor->Recv(id).status();
          absl::StatusOr<ReceivedTensor> second = executor->Recv(id);
          result.second = second.status();
          if (second.ok()) {
            result.second_overlapped =
                tracking.OverlapsReadInFlight(second->data(), second->bytes());
          }
        }  // the executor is destroyed (with, when stuck, the read still in flight)
        result.held_after_destruction = tracking.held();
        // The read completes at last (what a late NIC completion does).
        tracking.Release();
        for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(tracking.Progress().status());
        result.violations = tracking.violations();
        RETURN_IF_ERROR(store.Set(judged, "1"));
        return store.Wait({sender_done}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return result;
}

void ExpectFenced(const Result& result) {
  EXPECT_THAT(result.first,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 has not served the read of step 0"),
                             HasSubstr("tensor 'x:0'"))));
  // No memory the read may still write went to another tensor...
  EXPECT_FALSE(result.second_overlapped);
  // ... because the executor stays failed after giving up.
  EXPECT_THAT(result.second, StatusIs(absl::StatusCode::kDeadlineExceeded));
  // Nothing was freed under the read.
  EXPECT_THAT(result.violations, ::testing::IsEmpty());
  // The undelivered tensor was not released to its sender.
  EXPECT_THAT(result.sender_step2, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                            HasSubstr("rank 1 still holds step 0")));
}

TEST(ExecutorSlowPeerTest, AReadThatNeverCompletesIsCancelledBeforeItsMemoryIsReused) {
  const Result result = RunWithDroppedRead(/*stuck=*/false);
  ExpectFenced(result);
  EXPECT_EQ(result.held_after_destruction, 0);
}

TEST(ExecutorSlowPeerTest, AReadThatCannotBeCancelledKeepsItsMemoryUntilItCompletes) {
  // Closing the link does not bring the completion back: the executor gives
  // up after a bounded wait, and the read's destination stays allocated even
  // past the executor, until the completion fires.
  const Result result = RunWithDroppedRead(/*stuck=*/true);
  ExpectFenced(result);
  EXPECT_EQ(result.held_after_destruction, 1);
}

// A static tensor's write whose completion comes back only after the
// sender's executor is gone (a NIC that flushes nothing on Close; the test
// holds it, and the flushes of the executor's drain): the drain and the
// engine's fence give up on them, the staging the write reads stays
// allocated, and the late completions touch nothing of the executor's or
// its engine's. They ran against the freed executor before (this suite runs
// under AddressSanitizer in the test command), and the staging was freed
// under the write.
TEST(ExecutorSlowPeerTest, AWriteCompletingAfterTheExecutorIsGoneTouchesNothing) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, {kElements});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, graph::PlanGraph(std::move(b).Build(), {}));
  const int id = plan.link(0).slot(0).id();
  const std::string received = absl::StrCat(kNs, "/late_write_received");
  const std::string released = absl::StrCat(kNs, "/late_write_released");
  int64_t held_after_destruction = 0;
  bool arrived_whole = false;
  std::vector<std::string> violations;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        CommunicatorOptions options = Options(absl::Seconds(1));
        options.ns = "late_write";
        if (rank == 0) {
          TrackingTransport tracking(transport);
          tracking.hold_writes();
          tracking.hold_flushes();
          std::vector<std::byte> data(kBytes);
          FillPattern(3, id, 0, data.data(), data.size());
          {
            ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, tracking, store, options));
            RETURN_IF_ERROR(executor->Send(id, {data.data(), kBytes, {kElements}, nullptr}));
            // A progress round puts the write on the (loopback) wire.
            RETURN_IF_ERROR(executor->FinishStep());
            RETURN_IF_ERROR(store.Wait({received}, absl::Seconds(30)));
          }  // destroyed with the write's completion held
          held_after_destruction = tracking.held();
          // The completion fires at last (what a late NIC completion does).
          tracking.Release();
          for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(tracking.Progress().status());
          violations = tracking.violations();
          return store.Set(released, "1");
        }
        ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, options));
        ASSIGN_OR_RETURN(ReceivedTensor tensor, executor->Recv(id));
        arrived_whole = tensor.bytes() == kBytes &&
                        FindMismatch(3, id, 0, tensor.data(), tensor.bytes()) < 0;
        RETURN_IF_ERROR(store.Set(received, "1"));
        // Past the sender's end: its shutdown never reaches the barrier,
        // so ours gives up (not what this test judges).
        return store.Wait({released}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_TRUE(arrived_whole);
  EXPECT_GE(held_after_destruction, 2);  // the write and the drain's flush
  EXPECT_THAT(violations, ::testing::IsEmpty());
}

}  // namespace
}  // namespace rdmaflow::runtime
