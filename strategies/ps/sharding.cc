// File: sharding.cc
#include "strategies/ps/sharding.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

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
  std::vector<int> order(elements.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return elements[a] > elements[b]; });
  std::vector<int> owner(elements.size());
  std::vector<int64_t> load(servers, 0);
  for (int p : order) {
    const int s = static_cast<int>(std::min_element(load.begin(), load.end()) -
                                   load.begin());
    owner[p] = s;
    load[s] += elements[p];
  }
  std::vector<Shard> shards(servers);
  for (size_t p = 0; p < elements.size(); ++p) {
    Shard& shard = shards[owner[p]];
    shard.entries.push_back({static_cast<int>(p), shard.elements, elements[p]});
    shard.elements += elements[p];
  }
  return shards;
}

}  // namespace rdmaflow::strategies::ps
