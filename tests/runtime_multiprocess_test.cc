// Real multi-process runtime tests over UCX shared memory: ranks are OS
// processes that rendezvous through LibTorch's TCPStore. Every example graph
// arrives byte-exact through the zero-copy executor (dynamic tensors
// promoted to static slots after tracing, mid-run), the baselines deliver the
// same bytes, and a receiver killed mid-run gives its sender an error
// instead of a hang.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "rdma/torch/tcp_store.h"
#include "rdma/ucx/ucx_transport.h"
#include "runtime/communicator_factory.h"
#include "runtime/replay.h"
#include "tests/process_launcher.h"

namespace rdmaflow {
namespace {

constexpr char kModeEnv[] = "RDMAFLOW_RUNTIME_E2E";
constexpr int kSteps = 8;

absl::StatusOr<plan::TransferPlan> ExamplePlan(const std::string& file) {
  for (const graph::examples::NamedGraph& example :
       graph::examples::AllExamples()) {
    if (example.file == file) return graph::PlanGraph(example.graph, {});
  }
  return absl::NotFoundError(absl::StrCat("no example ", file));
}

plan::TransferPlan OneTensorPlan() {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, {1 << 16});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  graph::PlannerOptions options;
  options.pipeline_depth = 1;
  return *graph::PlanGraph(std::move(b).Build(), options);
}

// "replay:<example file>:<communicator>": replays kSteps with every byte
// checked. "kill": rank 1 exits after its first tensor; rank 0 must get an
// error (exit 0) rather than hang or succeed.
absl::Status RunRank(const std::string& mode) {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions store_options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  ASSIGN_OR_RETURN(auto store, rdma::torch::TcpStore::Create(store_options));
  const int rank = store_options.rank;
  rdma::ucx::UcxTransportOptions ucx;
  ucx.rank = rank;
  ucx.tls = "shm";
  ASSIGN_OR_RETURN(auto transport, rdma::ucx::UcxTransport::Create(ucx));
  runtime::CommunicatorOptions options;
  options.timeout = absl::Seconds(60);
  options.trace_steps = 2;
  std::vector<std::string> parts = absl::StrSplit(mode, ':');
  if (parts[0] == "replay" && parts.size() == 3) {
    ASSIGN_OR_RETURN(plan::TransferPlan plan, ExamplePlan(parts[1]));
    ASSIGN_OR_RETURN(auto communicator,
                     runtime::CreateCommunicator(parts[2], plan, *transport,
                                                 *store, options));
    ASSIGN_OR_RETURN(auto replayer, runtime::Replayer::Create(plan, rank, {}));
    for (int step = 0; step < kSteps; ++step) {
      RETURN_IF_ERROR(replayer->RunStep(*communicator, step).status());
    }
    return communicator->Shutdown();
  }
  if (parts[0] == "kill") {
    const plan::TransferPlan plan = OneTensorPlan();
    ASSIGN_OR_RETURN(auto communicator,
                     runtime::CreateCommunicator("rdma", plan, *transport,
                                                 *store, options));
    ASSIGN_OR_RETURN(auto replayer, runtime::Replayer::Create(plan, rank, {}));
    RETURN_IF_ERROR(replayer->RunStep(*communicator, 0).status());
    if (rank == 1) _exit(0);  // dies holding nothing back: no shutdown
    for (int step = 1; step < 1000; ++step) {
      absl::StatusOr<absl::Duration> ran = replayer->RunStep(*communicator, step);
      if (!ran.ok()) {
        std::fprintf(stderr, "rank 0 got, as expected: %s\n",
                     ran.status().ToString().c_str());
        return absl::IsUnavailable(ran.status())
                   ? absl::OkStatus()
                   : absl::InternalError("expected kUnavailable");
      }
    }
    return absl::InternalError("rank 0 kept sending to a dead rank");
  }
  return absl::InvalidArgumentError(absl::StrCat("bad mode ", mode));
}

class RuntimeMultiProcessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RuntimeMultiProcessTest, ExampleArrivesByteExactOverUcx) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, ExamplePlan(GetParam()));
  EXPECT_THAT(testing::LaunchRanks(
                  plan.world_size(),
                  {{kModeEnv, absl::StrCat("replay:", GetParam(), ":rdma")}}),
              ::testing::Each(0));
}

INSTANTIATE_TEST_SUITE_P(
    Examples, RuntimeMultiProcessTest,
    ::testing::Values("mlp_2ranks.pbtxt", "cnn_ps_2workers.pbtxt",
                      "cnn_layer_separated.pbtxt", "seq_dynamic_length.pbtxt"),
    [](const auto& info) {
      return std::string(absl::StripSuffix(info.param, ".pbtxt"));
    });

TEST(RuntimeMultiProcessBaselinesTest, BaselinesDeliverTheSameBytes) {
  for (const char* communicator : {"rdma_copy", "grpc"}) {
    SCOPED_TRACE(communicator);
    EXPECT_THAT(
        testing::LaunchRanks(
            3, {{kModeEnv,
                 absl::StrCat("replay:cnn_ps_2workers.pbtxt:", communicator)}}),
        ::testing::Each(0));
  }
}

TEST(RuntimeMultiProcessKillTest, KilledReceiverGivesTheSenderAnError) {
  EXPECT_THAT(testing::LaunchRanks(2, {{kModeEnv, "kill"}}),
              ::testing::Each(0));
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  if (const char* mode = std::getenv(rdmaflow::kModeEnv);
      mode != nullptr && std::getenv("RANK") != nullptr) {
    absl::Status status = rdmaflow::RunRank(mode);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"),
                   status.ToString().c_str());
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
