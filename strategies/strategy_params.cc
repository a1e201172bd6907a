// File: strategy_params.cc
#include "strategies/strategy_params.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::strategies {

absl::Status CheckTrainingOptions(const std::string& strategy, int64_t steps,
                                  double learning_rate, double momentum) {
  if (steps >= 1 && learning_rate > 0 && momentum >= 0 && momentum < 1) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      strategy, " needs steps >= 1, a positive learning rate and 0 <= momentum < 1 "
      "(got steps ", steps, ", lr ", learning_rate, ", momentum ", momentum, ")"));
}

}  // namespace rdmaflow::strategies
