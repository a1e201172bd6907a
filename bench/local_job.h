// File: local_job.h
// -----------------------------------------------------------------------------
// Local multi-process jobs for the benchmark tools, the way torchrun starts
// them: the calling process is rank 0 and hosts the TCPStore on a free port;
// ranks 1..N-1 are the same binary re-executed with RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT set (and extra flags). Under torchrun, mpirun
// or Slurm a tool skips this and reads the environment itself.
#ifndef RDMAFLOW_BENCH_LOCAL_JOB_H_
#define RDMAFLOW_BENCH_LOCAL_JOB_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::bench {

// Set in the environment of a rank that RunLocalJob restarted.
inline constexpr char kRejoinVariable[] = "RDMAFLOW_REJOIN";

// Churn experiments: a child of rank `expendable` killed by SIGKILL does not
// count as failing; with `restart`, it is started again (once) with
// RDMAFLOW_REJOIN=1 in its environment, and then counts like the others.
struct LocalJobChurn {
  int expendable = -1;
  bool restart = false;
};

// Starts ranks 1..world_size-1 as children running this binary with `argv`
// plus `extra_flags`, runs `rank0(store)` here, then waits for the children
// (killing them if rank 0 failed). Returns rank 0's exit code, or the first
// failing child's.
int RunLocalJob(int world_size, char** argv,
                const std::vector<std::string>& extra_flags,
                const std::function<int(rdma::Store&)>& rank0,
                const LocalJobChurn& churn = {});

// In a child of RunLocalJob (or under torchrun): joins the job's store and
// runs `body(rank, world_size, store)`. Returns its exit code.
int RunLaunchedRank(
    const std::function<int(int rank, int world_size, rdma::Store&)>& body);

// Creates transport `name` ("ucx", "ibverbs", "loopback") for `rank` with
// "key=value,..." backend parameters, through the transport registry.
absl::StatusOr<std::unique_ptr<rdma::Transport>> MakeTransport(
    const std::string& name, const std::string& params, int rank);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_LOCAL_JOB_H_
