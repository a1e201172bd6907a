// File: builtin_strategies.h
// -----------------------------------------------------------------------------
// Registers the strategies rdmaflow ships ("ps" so far) in a registry.
// Explicit, so that linking a strategy in never registers it behind the
// caller's back.
#ifndef RDMAFLOW_STRATEGIES_BUILTIN_STRATEGIES_H_
#define RDMAFLOW_STRATEGIES_BUILTIN_STRATEGIES_H_

#include "absl/status/status.h"
#include "strategies/strategy_registry.h"

namespace rdmaflow::strategies {

absl::Status RegisterBuiltinStrategies(StrategyRegistry& registry);

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_BUILTIN_STRATEGIES_H_
