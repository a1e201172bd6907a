// File: runtime_e2e_rank.h
// -----------------------------------------------------------------------------
// One rank of the runtime's multi-process tests (runtime_multiprocess_test
// over UCX, runtime_ibverbs_test over native verbs in the Soft-RoCE VM):
// the launcher (launch/launcher.h) sets the mode and the transport in the
// environment; the re-executed binary runs RunRuntimeRank.
#ifndef RDMAFLOW_TESTS_RUNTIME_E2E_RANK_H_
#define RDMAFLOW_TESTS_RUNTIME_E2E_RANK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph_analyzer/plan.pb.h"
#include "rdma/transport.h"

namespace rdmaflow {

// "replay:<example file>:<communicator>" or "kill".
inline constexpr char kModeEnv[] = "RDMAFLOW_RUNTIME_E2E";
// Transport name and "key=value,..." parameters for the registry.
inline constexpr char kTransportEnv[] = "RDMAFLOW_RUNTIME_E2E_TRANSPORT";
inline constexpr char kParamsEnv[] = "RDMAFLOW_RUNTIME_E2E_PARAMS";

// The plan of example graph `file` (graph_analyzer/testdata name).
absl::StatusOr<plan::TransferPlan> ExamplePlan(const std::string& file);

// The transport the environment names, for `rank`.
absl::StatusOr<std::unique_ptr<rdma::Transport>> MakeTransport(int rank);

// "replay:...": replays the example through the communicator with every byte
// checked. "kill": rank 1 exits after its first tensor; rank 0 succeeds only
// if it then gets kUnavailable (an error, not a hang).
absl::Status RunRuntimeRank(const std::string& mode);

// main(): a launched rank runs RunRuntimeRank, otherwise the tests run.
int RuntimeE2eMain(int argc, char** argv);

}  // namespace rdmaflow

#endif  // RDMAFLOW_TESTS_RUNTIME_E2E_RANK_H_
