// The three communicators behind one interface: each delivers the same bytes
// for every example graph (the replayer checks every byte against the
// pattern all of them are fed), counts its copies, and rejects bad calls the
// same way.
#include "runtime/communicator_factory.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "runtime/rank_plan.h"
#include "runtime/replay.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class CommunicatorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CommunicatorTest, DeliversEveryExampleByteExact) {
  for (const graph::examples::NamedGraph& example :
       graph::examples::AllExamples()) {
    SCOPED_TRACE(example.file);
    ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                         graph::PlanGraph(example.graph, {}));
    ReplayOptions replay;
    replay.dynamic_dim = [](const TransferInfo& info, int64_t step, int d) {
      return 1 + (step * 3 + info.id + d) % 9;
    };
    std::vector<TransferCounters> counters(plan.world_size());
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        plan.world_size(),
        [&](int rank, rdma::Transport& transport,
            rdma::Store& store) -> absl::Status {
          CommunicatorOptions options;
          options.trace_steps = 0;
          ASSIGN_OR_RETURN(auto communicator,
                           CreateCommunicator(GetParam(), plan, transport,
                                              store, options));
          // Only the zero-copy communicator sends from an arena in place.
          if (communicator->SendsInPlace() != (GetParam() == "rdma")) {
            return absl::InternalError(absl::StrCat(GetParam(), " says SendsInPlace() ",
                                                    communicator->SendsInPlace()));
          }
          ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, replay));
          for (int step = 0; step < 4; ++step) {
            RETURN_IF_ERROR(replayer->RunStep(*communicator, step).status());
          }
          RETURN_IF_ERROR(communicator->Shutdown());
          counters[rank] = communicator->counters();
          return absl::OkStatus();
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
    int64_t sent = 0, received = 0, copies = 0;
    for (const TransferCounters& c : counters) {
      sent += c.tensors_sent;
      received += c.tensors_received;
      copies += c.copies;
    }
    EXPECT_EQ(sent, received);
    EXPECT_GT(sent, 0);
    // Heap tensors: the zero-copy path stages static ones once (dynamic ones
    // go through the pool); the baselines copy on both sides.
    if (GetParam() != "rdma") {
      EXPECT_GE(copies, 2 * sent);
    }
  }
}

// Every region a communicator fetches from the store is prepared on its
// endpoint before the first post to it, while the peer is known to hold it
// (with UCX, a first post after the peer let the region go unpacks a dead
// key). The FaultyTransport refuses posts to unprepared regions.
TEST_P(CommunicatorTest, PreparesEveryPeerRegionBeforeItsFirstPost) {
  for (const graph::examples::NamedGraph& example : graph::examples::AllExamples()) {
    SCOPED_TRACE(example.file);
    ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, graph::PlanGraph(example.graph, {}));
    ReplayOptions replay;
    replay.dynamic_dim = [](const TransferInfo& info, int64_t step, int d) {
      return 1 + (step + info.id + d) % 5;
    };
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        plan.world_size(),
        [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          rdma::testing::FaultyTransport strict(transport);
          strict.require_prepare();
          CommunicatorOptions options;
          options.trace_steps = 0;
          ASSIGN_OR_RETURN(auto communicator,
                           CreateCommunicator(GetParam(), plan, strict, store, options));
          ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, replay));
          for (int step = 0; step < 2; ++step) {
            RETURN_IF_ERROR(replayer->RunStep(*communicator, step).status());
          }
          return communicator->Shutdown();
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
  }
}

TEST_P(CommunicatorTest, RejectsUnknownIdsAndRepeatedSends) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), {}));
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.trace_steps = 0;
        ASSIGN_OR_RETURN(auto communicator,
                         CreateCommunicator(GetParam(), plan, transport, store,
                                            options));
        EXPECT_THAT(communicator->Send(9999, {}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("no transfer with id 9999")));
        ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, {}));
        RETURN_IF_ERROR(replayer->RunStep(*communicator, 0).status());
        return communicator->Shutdown();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Free-running: one transfer moves five times while the others never move,
// in order and byte-exact, and Ready() tells when the next one is in.
TEST_P(CommunicatorTest, FreeRunningTransfersKeepTheirOwnSequence) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), {}));
  ASSERT_OK_AND_ASSIGN(RankPlan sender_plan, RankPlan::Create(plan, 0));
  ASSERT_FALSE(sender_plan.sends().empty());
  const TransferInfo info = sender_plan.sends().front();
  ASSERT_FALSE(info.dynamic);
  constexpr int kTimes = 5;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.lockstep = false;
        ASSIGN_OR_RETURN(auto communicator,
                         CreateCommunicator(GetParam(), plan, transport, store,
                                            options));
        std::vector<int64_t> shape(info.spec.shape().begin(),
                                   info.spec.shape().end());
        for (int i = 0; i < kTimes; ++i) {
          if (rank == 0) {
            auto bytes = std::make_shared<std::vector<std::byte>>(
                info.data_bytes, std::byte(i + 1));
            RETURN_IF_ERROR(communicator->Send(
                info.id, {bytes->data(), bytes->size(), shape, bytes}));
            continue;
          }
          bool ready = false;
          while (!ready) {
            ASSIGN_OR_RETURN(ready, communicator->Ready(info.id));
          }
          ASSIGN_OR_RETURN(ReceivedTensor tensor, communicator->Recv(info.id));
          EXPECT_EQ(tensor.bytes(), info.data_bytes);
          for (size_t b = 0; b < tensor.bytes(); ++b) {
            if (tensor.data()[b] != std::byte(i + 1)) {
              return absl::DataLossError(absl::StrCat(
                  "tensor ", i, " byte ", b, " is wrong"));
            }
          }
          // Nothing else moved, and no step ended: still fine.
        }
        EXPECT_OK(communicator->FinishStep());
        return communicator->Shutdown();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Ready() is false while the sender has not sent (it waits for the
// receiver's word in the store before it does), and names unknown ids.
TEST_P(CommunicatorTest, ReadyIsFalseUntilTheSenderSends) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), {}));
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.trace_steps = 0;
        ASSIGN_OR_RETURN(auto communicator,
                         CreateCommunicator(GetParam(), plan, transport, store,
                                            options));
        ASSIGN_OR_RETURN(RankPlan mine, RankPlan::Create(plan, rank));
        if (rank == 1) {
          for (const TransferInfo& info : mine.recvs()) {
            EXPECT_THAT(communicator->Ready(info.id), IsOkAndHolds(false))
                << info.Describe();
          }
          EXPECT_THAT(communicator->Ready(12345),
                      StatusIs(absl::StatusCode::kInvalidArgument));
          RETURN_IF_ERROR(store.Set("test/checked", "1"));
        } else {
          RETURN_IF_ERROR(store.Wait({"test/checked"}, absl::Seconds(60)));
        }
        ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, {}));
        RETURN_IF_ERROR(replayer->RunStep(*communicator, 0).status());
        return communicator->Shutdown();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Ranks that run different plans (here another pipeline depth) lay out a
// link's slots otherwise: the executor stops at set-up, each rank quoting
// both layouts (runtime/link_records.h), instead of writing into memory laid
// out for another plan.
TEST(ExecutorSetUpTest, RanksRunningDifferentPlansAreRefused) {
  graph::PlannerOptions deeper;
  deeper.pipeline_depth = 3;
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan two,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), {}));
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan three,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), deeper));
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.timeout = absl::Seconds(20);
        return CreateCommunicator("rdma", rank == 0 ? two : three, transport, store, options)
            .status();
      });
  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 AllOf(HasSubstr("the executor of rank"), HasSubstr("depth=2"),
                                       HasSubstr("depth=3"))));
  }
}

INSTANTIATE_TEST_SUITE_P(AllCommunicators, CommunicatorTest,
                         ::testing::Values("rdma", "rdma_copy", "grpc"));

TEST(CommunicatorFactoryTest, UnknownNameListsTheKnownOnes) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) {
        plan::TransferPlan plan;
        plan.set_world_size(1);
        return CreateCommunicator("mpi", plan, transport, store, {}).status();
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kNotFound,
                                   HasSubstr("rdma, rdma_copy, grpc")));
}

}  // namespace
}  // namespace rdmaflow::runtime
