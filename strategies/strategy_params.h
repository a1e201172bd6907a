// File: strategy_params.h
// -----------------------------------------------------------------------------
// Reads a strategy's "key=value" parameters (StrategyOptions::params) with
// the rule every owner of settings follows (common/key_value_params.h), and
// checks the training options every strategy shares.
//
//   StrategyParams p("allreduce", options.params);
//   RETURN_IF_ERROR(p.Size("bucket_bytes", 1, &bucket_bytes));
//   RETURN_IF_ERROR(p.Done());
#ifndef RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_
#define RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/key_value_params.h"

namespace rdmaflow::strategies {

using StrategyParams = KeyValueParams;

// kInvalidArgument unless steps >= 1, learning_rate > 0 and
// 0 <= momentum < 1, naming `strategy` and the values.
absl::Status CheckTrainingOptions(const std::string& strategy, int64_t steps,
                                  double learning_rate, double momentum);

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_
