// File: run_length.h
// -----------------------------------------------------------------------------
// How many steps a benchmark run times (the ablation's --min_time_s): the
// flag's count, or more where those would take less than a minimum time,
// up to kMaxStepsFactor times the flag's; and the check a rank makes of the
// count rank 0 published through the store (untrusted text).
#ifndef RDMAFLOW_BENCH_RUN_LENGTH_H_
#define RDMAFLOW_BENCH_RUN_LENGTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rdmaflow::bench {

inline constexpr int kMaxStepsFactor = 100;

// flag_steps >= 1, min_time_s >= 0: max(flag_steps, ceil(min_time_s /
// per_step)), at most kMaxStepsFactor * flag_steps (and INT_MAX).
int StepsFor(int flag_steps, double min_time_s, absl::Duration per_step);

// The step count in `value` (what rank 0 wrote under `key`):
// kInvalidArgument unless it is a whole number from flag_steps to
// kMaxStepsFactor * flag_steps.
absl::StatusOr<int> ParseAgreedSteps(absl::string_view key, absl::string_view value,
                                     int flag_steps);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_RUN_LENGTH_H_
