// File: rank.h
// -----------------------------------------------------------------------------
// The rank's side of a launch: a process started by the local launcher
// (launch/launcher.h) or by torchrun joins its job's store from RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT (rank 0 hosts the store unless
// TORCHELASTIC_USE_AGENT_STORE=True), its keys scoped by the run
// (rdma/torch/run_scope.h).
#ifndef RDMAFLOW_LAUNCH_RANK_H_
#define RDMAFLOW_LAUNCH_RANK_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "rdma/store.h"

namespace rdmaflow::launch {

// A rank that joined its job. Move-only.
struct JoinedRank {
  int rank = 0;
  int world_size = 0;
  std::unique_ptr<rdma::Store> store;
};

// Joins the job the environment describes. kInvalidArgument naming a
// missing or malformed variable; kUnavailable when the store cannot be
// reached (or, on rank 0, started).
absl::StatusOr<JoinedRank> JoinJob();

// True in a rank the launcher restarted (RDMAFLOW_REJOIN=1).
bool IsRejoining();

// JoinJob(), then body(rank, world_size, store); returns body's exit code,
// or prints the error and returns 2 for a malformed environment, 1 when
// the store cannot be joined.
int RunLaunchedRank(
    const std::function<int(int rank, int world_size, rdma::Store& store)>& body);

}  // namespace rdmaflow::launch

#endif  // RDMAFLOW_LAUNCH_RANK_H_
