// File: strategy_params.h
// -----------------------------------------------------------------------------
// Reads a strategy's "key=value" parameters (StrategyOptions::params) with
// one rule for every strategy: each known key is parsed and range-checked,
// and any key left over is an error listing the known ones.
//
//   StrategyParams p("allreduce", options.params);
//   RETURN_IF_ERROR(p.Size("bucket_bytes", 1, &bucket_bytes));
//   RETURN_IF_ERROR(p.Done());
#ifndef RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_
#define RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rdmaflow::strategies {

// Thread-compatible.
class StrategyParams {
 public:
  StrategyParams(std::string strategy, std::map<std::string, std::string> params)
      : strategy_(std::move(strategy)), params_(std::move(params)) {}

  // If `key` is present, parses it into *value (an integer >= minimum);
  // kInvalidArgument naming the key and value otherwise. Absent keys leave
  // *value as it is.
  absl::Status Int(const std::string& key, int64_t minimum, int64_t* value);
  absl::Status Int(const std::string& key, int minimum, int* value);
  // A real number in [minimum, maximum].
  absl::Status Real(const std::string& key, double minimum, double maximum,
                    double* value);
  // Byte sizes also accept K, M and G suffixes (powers of 1024).
  absl::Status Size(const std::string& key, int64_t minimum, int64_t* value);
  // One of `choices`.
  absl::Status Choice(const std::string& key,
                      const std::vector<std::string>& choices, std::string* value);
  // kInvalidArgument if a key was never asked for.
  absl::Status Done() const;

 private:
  const std::string strategy_;
  std::map<std::string, std::string> params_;
  std::vector<std::string> known_;
};

// kInvalidArgument unless steps >= 1, learning_rate > 0 and
// 0 <= momentum < 1, naming `strategy` and the values.
absl::Status CheckTrainingOptions(const std::string& strategy, int64_t steps,
                                  double learning_rate, double momentum);

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_STRATEGY_PARAMS_H_
