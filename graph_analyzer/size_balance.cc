// File: size_balance.cc
#include "graph_analyzer/size_balance.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace rdmaflow::graph {

std::vector<int> BalanceBySize(const std::vector<int64_t>& sizes, int bins) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return sizes[a] > sizes[b]; });
  std::vector<int> bin(sizes.size(), 0);
  std::vector<int64_t> load(std::max(bins, 1), 0);
  for (int i : order) {
    const int b = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    const int64_t size = std::max<int64_t>(sizes[i], 0);
    bin[i] = b;
    load[b] = load[b] > kMax - size ? kMax : load[b] + size;
  }
  return bin;
}

}  // namespace rdmaflow::graph
