#include "bench/run_length.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::bench {

int StepsFor(int flag_steps, double min_time_s, absl::Duration per_step) {
  const double per_step_s = std::max(absl::ToDoubleSeconds(per_step), 1e-9);
  const double needed = std::ceil(min_time_s / per_step_s);
  const double most = std::min<double>(static_cast<double>(flag_steps) * kMaxStepsFactor,
                                       std::numeric_limits<int>::max());
  return static_cast<int>(std::clamp(needed, static_cast<double>(flag_steps), most));
}

absl::StatusOr<int> ParseAgreedSteps(absl::string_view key, absl::string_view value,
                                     int flag_steps) {
  const int64_t most = int64_t{flag_steps} * kMaxStepsFactor;
  int64_t steps = 0;
  if (!absl::SimpleAtoi(value, &steps) || steps < flag_steps || steps > most ||
      steps > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank 0's step count in the store (", key, ") is '", absl::CEscape(value).substr(0, 64),
        "', not ", flag_steps, " to ", most,
        " steps: do all ranks run this binary with the same flags?"));
  }
  return static_cast<int>(steps);
}

}  // namespace rdmaflow::bench
