// File: runtime_e2e_rank.cc
#include "tests/runtime_e2e_rank.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "launch/rank.h"
#include "launch/ranks_or_tests_main.h"
#include "rdma/builtin_transports.h"
#include "rdma/transport_registry.h"
#include "runtime/communicator_factory.h"
#include "runtime/replay.h"

namespace rdmaflow {
namespace {

// Transfer steps per replay: enough for tracing (2 steps), promotion and
// pipelining to wrap around; few enough for Soft-RoCE under emulation.
constexpr int kSteps = 5;

// A 256 KiB tensor from rank 0 to rank 1, no pipelining.
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

}  // namespace

absl::StatusOr<std::unique_ptr<rdma::Transport>> MakeTransport(int rank) {
  const char* name = std::getenv(kTransportEnv);
  const char* params = std::getenv(kParamsEnv);
  rdma::TransportRegistry registry;
  RETURN_IF_ERROR(rdma::RegisterBuiltinTransports(registry));
  rdma::TransportConfig config;
  config.rank = rank;
  ASSIGN_OR_RETURN(config.params,
                   rdma::ParseTransportParams(params != nullptr ? params : ""));
  return registry.Create(name != nullptr ? name : "ucx", config);
}

absl::StatusOr<plan::TransferPlan> ExamplePlan(const std::string& file) {
  for (const graph::examples::NamedGraph& example :
       graph::examples::AllExamples()) {
    if (example.file == file) return graph::PlanGraph(example.graph, {});
  }
  return absl::NotFoundError(absl::StrCat("no example ", file));
}

absl::Status RunRuntimeRank(const std::string& mode) {
  ASSIGN_OR_RETURN(launch::JoinedRank joined, launch::JoinJob());
  std::unique_ptr<rdma::Store>& store = joined.store;
  const int rank = joined.rank;
  ASSIGN_OR_RETURN(auto transport, MakeTransport(rank));
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
  if (parts[0] == "exit_before_post" && parts.size() == 2) {
    // Rank 1 (the receiver) exits right after both ranks' set-up, before
    // rank 0 posts anything to it. Rank 0's regions of rank 1 were prepared
    // at set-up (Endpoint::Prepare), so its first posts find a gone peer and
    // fail with kUnavailable, never a fault in UCX unpacking a removed
    // segment's key. (A peer gone before rank 0's set-up has prepared its
    // regions is the conformance suite's
    // RegionOfAPeerDeadBeforeItsFirstUseIsAnError.)
    const plan::TransferPlan plan = OneTensorPlan();
    ASSIGN_OR_RETURN(auto communicator,
                     runtime::CreateCommunicator(parts[1], plan, *transport, *store, options));
    if (rank == 1) {
      // A rank's set-up may end before its peer's has prepared: wait.
      RETURN_IF_ERROR(store->Get("sender_set_up", absl::Seconds(60)).status());
      RETURN_IF_ERROR(store->Set("receiver_pid", absl::StrCat(getpid())));
      _exit(0);  // no shutdown, nothing posted to it yet
    }
    RETURN_IF_ERROR(store->Set("sender_set_up", "1"));
    ASSIGN_OR_RETURN(std::string pid_text, store->Get("receiver_pid", absl::Seconds(60)));
    int pid = 0;
    if (!absl::SimpleAtoi(pid_text, &pid) || pid <= 0) {
      return absl::InternalError(absl::StrCat("receiver_pid ", pid_text));
    }
    // Until the launcher has reaped it (bounded).
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (kill(pid, 0) == 0) {
      if (absl::Now() > give_up) return absl::InternalError("rank 1 did not exit");
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSIGN_OR_RETURN(auto replayer, runtime::Replayer::Create(plan, rank, {}));
    for (int step = 0; step < 1000; ++step) {
      absl::StatusOr<absl::Duration> ran = replayer->RunStep(*communicator, step);
      if (!ran.ok()) {
        std::fprintf(stderr, "rank 0 got, as expected: %s\n", ran.status().ToString().c_str());
        return absl::IsUnavailable(ran.status())
                   ? absl::OkStatus()
                   : absl::InternalError("expected kUnavailable");
      }
    }
    return absl::InternalError("rank 0 kept sending to a rank that exited");
  }
  return absl::InvalidArgumentError(absl::StrCat("bad mode ", mode));
}

int RuntimeE2eMain(int argc, char** argv) {
  return launch::RanksOrTestsMain(argc, argv, kModeEnv, RunRuntimeRank);
}

}  // namespace rdmaflow
