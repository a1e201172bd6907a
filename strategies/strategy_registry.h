// File: strategy_registry.h
// -----------------------------------------------------------------------------
// StrategyRegistry: strategies by name. Registration is explicit
// (RegisterBuiltinStrategies in builtin_strategies.h, or a caller's own
// Register()), never a static initializer.
#ifndef RDMAFLOW_STRATEGIES_STRATEGY_REGISTRY_H_
#define RDMAFLOW_STRATEGIES_STRATEGY_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

using StrategyFactory = std::function<absl::StatusOr<std::unique_ptr<Strategy>>(
    const StrategyOptions& options)>;

// Thread-compatible.
class StrategyRegistry {
 public:
  // kAlreadyExists for a name registered before; kInvalidArgument for an
  // empty name or factory.
  absl::Status Register(const std::string& name, std::string summary,
                        StrategyFactory factory);
  // kNotFound listing the registered names; otherwise the factory's result.
  absl::StatusOr<std::unique_ptr<Strategy>> Create(
      const std::string& name, const StrategyOptions& options) const;
  // Registered names, sorted.
  std::vector<std::string> names() const;
  // "name: summary" lines, for --help.
  std::string Describe() const;

 private:
  struct Entry {
    std::string summary;
    StrategyFactory factory;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_STRATEGY_REGISTRY_H_
