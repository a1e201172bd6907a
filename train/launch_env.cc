// File: launch_env.cc
#include "train/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::train {

absl::StatusOr<std::optional<LaunchInfo>> DetectLaunch(const GetEnv& getenv) {
  struct Launcher {
    const char* name;
    const char* rank;
    const char* size;
  };
  static constexpr Launcher kLaunchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE"},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"pmi", "PMI_RANK", "PMI_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const Launcher& launcher : kLaunchers) {
    const char* rank = getenv(launcher.rank);
    const char* size = getenv(launcher.size);
    if (rank == nullptr && size == nullptr) continue;
    LaunchInfo info;
    info.launcher = launcher.name;
    if (rank == nullptr || !absl::SimpleAtoi(rank, &info.rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          launcher.rank, " must be a rank number (", launcher.size, " is set)"));
    }
    if (size == nullptr || !absl::SimpleAtoi(size, &info.world_size) ||
        info.world_size < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          launcher.size, " must be a positive count (", launcher.rank, " is set)"));
    }
    if (info.rank < 0 || info.rank >= info.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          launcher.rank, "=", info.rank, " is outside ", launcher.size, "=",
          info.world_size));
    }
    return std::optional<LaunchInfo>(info);
  }
  return std::optional<LaunchInfo>();
}

void ExportLaunch(const LaunchInfo& info) {
  setenv("RANK", absl::StrCat(info.rank).c_str(), 1);
  setenv("WORLD_SIZE", absl::StrCat(info.world_size).c_str(), 1);
}

}  // namespace rdmaflow::train
