// File: sharding.cc
#include "strategies/ps/sharding.h"

#include "absl/strings/str_cat.h"
#include "graph_analyzer/size_balance.h"

namespace rdmaflow::strategies::ps {

absl::StatusOr<std::vector<Shard>> ShardParameters(
    const std::vector<int64_t>& elements, int servers) {
  if (servers < 1) {
    return absl::InvalidArgumentError("a parameter server job needs a server");
  }
  if (static_cast<size_t>(servers) > elements.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        servers, " servers for ", elements.size(),
        " parameter tensors: some server would hold nothing; use at most ",
        elements.size()));
  }
  for (size_t i = 0; i < elements.size(); ++i) {
    if (elements[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " has ", elements[i], " elements"));
    }
  }
  // The rule the planner's placement uses (graph_analyzer/size_balance.h).
  const std::vector<int> owner = graph::BalanceBySize(elements, servers);
  std::vector<Shard> shards(servers);
  for (size_t p = 0; p < elements.size(); ++p) {
    Shard& shard = shards[owner[p]];
    shard.entries.push_back({static_cast<int>(p), shard.elements, elements[p]});
    shard.elements += elements[p];
  }
  return shards;
}

}  // namespace rdmaflow::strategies::ps
