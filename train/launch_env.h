// File: launch_env.h
// -----------------------------------------------------------------------------
// Which launcher started this process, and so which rank it is: torchrun
// (RANK, WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE), MPICH
// or Intel MPI (PMI_RANK/PMI_SIZE), Slurm's srun (SLURM_PROCID/NTASKS).
// The rendezvous store always comes from MASTER_ADDR and MASTER_PORT (set
// them in the job script under mpirun or Slurm, as for torch.distributed).
#ifndef RDMAFLOW_TRAIN_LAUNCH_ENV_H_
#define RDMAFLOW_TRAIN_LAUNCH_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace rdmaflow::train {

// Value type.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  std::string launcher;  // "torchrun", "mpirun", "pmi", "slurm"
};

using GetEnv = std::function<const char*(const char*)>;

// The first launcher whose variables are set, in the order above; nullopt
// when none is (a plain start). kInvalidArgument naming the variable when
// one is set but malformed (not a number, rank outside the world).
absl::StatusOr<std::optional<LaunchInfo>> DetectLaunch(const GetEnv& getenv);

// Exports RANK and WORLD_SIZE (what the store reads) for `info`.
void ExportLaunch(const LaunchInfo& info);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_LAUNCH_ENV_H_
