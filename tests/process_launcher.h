// File: process_launcher.h
// -----------------------------------------------------------------------------
// Multi-process end-to-end tests: the test binary is the launcher (it hosts
// the TCPStore, as torchrun's agent does) and re-executes itself once per
// rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and test-specific
// variables set; the child's main() sees RANK and runs the rank instead of
// the tests.
#ifndef RDMAFLOW_TESTS_PROCESS_LAUNCHER_H_
#define RDMAFLOW_TESTS_PROCESS_LAUNCHER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::testing {

// Starts `world` ranks of this binary with `env` added and returns their
// exit codes, by rank (128 + signal for a rank killed by a signal; empty if
// the store could not start).
std::vector<int> LaunchRanks(int world,
                             const std::map<std::string, std::string>& env);

// A launched rank over UCX: the job's store (from RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) and a UCX transport with transports `tls`.
struct UcxRank {
  int rank = 0;
  int world_size = 0;
  std::unique_ptr<rdma::Store> store;
  std::unique_ptr<rdma::Transport> transport;
};
absl::StatusOr<UcxRank> JoinAsUcxRank(const std::string& tls);

// main() of such a binary: in a child (RANK and `env` set) runs
// `rank(getenv(env))` and returns 0, or prints its error and returns 1;
// otherwise runs the tests.
int RanksOrTestsMain(int argc, char** argv, const char* env,
                     const std::function<absl::Status(const char* value)>& rank);

}  // namespace rdmaflow::testing

#endif  // RDMAFLOW_TESTS_PROCESS_LAUNCHER_H_
