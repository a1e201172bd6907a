// File: sharding.cc
#include "strategies/ps/sharding.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/size_balance.h"

namespace rdmaflow::strategies::ps {

namespace {

absl::Status CheckCounts(const std::vector<int64_t>& elements, int servers) {
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Shard>> ShardParameters(
    const std::vector<int64_t>& elements, int servers) {
  RETURN_IF_ERROR(CheckCounts(elements, servers));
  // The rule the planner's placement uses (graph_analyzer/size_balance.h).
  return ShardParametersOnto(elements, graph::BalanceBySize(elements, servers), servers);
}

absl::StatusOr<std::vector<Shard>> ShardParametersOnto(const std::vector<int64_t>& elements,
                                                       const std::vector<int>& owner,
                                                       int servers) {
  RETURN_IF_ERROR(CheckCounts(elements, servers));
  if (owner.size() != elements.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        owner.size(), " owners for ", elements.size(), " parameter tensors"));
  }
  std::vector<Shard> shards(servers);
  for (size_t p = 0; p < elements.size(); ++p) {
    if (owner[p] < 0 || owner[p] >= servers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", p, " is placed on server ", owner[p], " of ", servers));
    }
    Shard& shard = shards[owner[p]];
    shard.entries.push_back({static_cast<int>(p), shard.elements, elements[p]});
    shard.elements += elements[p];
  }
  for (int s = 0; s < servers; ++s) {
    if (shards[s].entries.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server ", s, " of ", servers, " holds no parameter in this placement"));
    }
  }
  return shards;
}

}  // namespace rdmaflow::strategies::ps
