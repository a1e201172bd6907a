// File: sharding.h
// -----------------------------------------------------------------------------
// Size-balanced sharding of a model's parameters over parameter servers:
// whole tensors, largest first, each onto the server holding the fewest
// elements so far (graph::BalanceBySize, the rule `rdmaflow plan --strategy
// ps` places a model's parameters by, so the plan and the run agree). A
// shard is the concatenation of its tensors in model order: one flat float
// buffer per server, pushed and pulled as one tensor.
#ifndef RDMAFLOW_STRATEGIES_PS_SHARDING_H_
#define RDMAFLOW_STRATEGIES_PS_SHARDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdmaflow::strategies::ps {

// Where one parameter lives. Value type.
struct ShardEntry {
  int parameter = 0;   // index in the model's parameter list
  int64_t offset = 0;  // in elements, within the shard
  int64_t elements = 0;
};

// One server's shard. Value type.
struct Shard {
  int64_t elements = 0;
  std::vector<ShardEntry> entries;  // in model order
};

// Shards parameters of the given element counts over `servers` servers.
// kInvalidArgument when there are no servers, or more servers than
// parameters (a server would hold nothing), or a count is not positive.
absl::StatusOr<std::vector<Shard>> ShardParameters(
    const std::vector<int64_t>& elements, int servers);

// The same, with parameter p on server `owner[p]` (as a plan placed it)
// instead of by size. kInvalidArgument also for an owner outside
// [0, servers) and for a server left with nothing.
absl::StatusOr<std::vector<Shard>> ShardParametersOnto(const std::vector<int64_t>& elements,
                                                       const std::vector<int>& owner,
                                                       int servers);

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_SHARDING_H_
