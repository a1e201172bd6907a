// File: run_scope.h
// -----------------------------------------------------------------------------
// RunScope: the store-key prefix that tells runs of a job, and the restarts
// of one run, apart. torchrun restarts every worker of a run after a
// failure (elastic restarts) against the same store: without a scope, the
// new workers would find the old attempt's keys, pass barriers at once and
// fetch stale descriptors. The run id comes from TORCHELASTIC_RUN_ID (or
// RDMAFLOW_RUN_ID), the attempt from TORCHELASTIC_RESTART_COUNT. A rank
// that rejoins a running job (rdmaflow_train --restart_killed) keeps its
// run's scope: its peers are still in the same attempt.
//
//   ASSIGN_OR_RETURN(RunScope scope, RunScope::FromEnvironment());
//   store.Set(absl::StrCat(scope.prefix(), "/ring/0"), ...);
#ifndef RDMAFLOW_RDMA_TORCH_RUN_SCOPE_H_
#define RDMAFLOW_RDMA_TORCH_RUN_SCOPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace rdmaflow::rdma::torch {

struct RunScope {
  std::string run_id = "none";  // torchrun's default when none is given
  int64_t attempt = 0;

  // "run/<run_id>/attempt/<attempt>".
  std::string prefix() const;

  // RDMAFLOW_RUN_ID, else TORCHELASTIC_RUN_ID, else "none"; the attempt
  // from TORCHELASTIC_RESTART_COUNT (default 0). kInvalidArgument naming
  // the variable for a run id that is empty, longer than 128 bytes or has
  // characters other than [A-Za-z0-9._-], or a count that is not an integer
  // in 0..1000000.
  static absl::StatusOr<RunScope> FromEnvironment();
};

}  // namespace rdmaflow::rdma::torch

#endif  // RDMAFLOW_RDMA_TORCH_RUN_SCOPE_H_
