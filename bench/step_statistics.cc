// File: step_statistics.cc
#include "bench/step_statistics.h"

#include <algorithm>
#include <cstddef>

namespace rdmaflow::bench {

double MedianOfBlockMeans(const std::vector<std::vector<double>>& ranks,
                          int blocks) {
  if (ranks.empty() || blocks < 1) return 0;
  size_t steps = ranks[0].size();
  for (const std::vector<double>& rank : ranks) steps = std::min(steps, rank.size());
  if (steps == 0) return 0;
  const size_t count = std::min(steps, static_cast<size_t>(blocks));
  std::vector<double> per_step;
  per_step.reserve(count);
  for (size_t b = 0; b < count; ++b) {
    const size_t begin = b * steps / count;
    const size_t end = (b + 1) * steps / count;
    double slowest = 0;
    for (const std::vector<double>& rank : ranks) {
      double total = 0;
      for (size_t i = begin; i < end; ++i) total += rank[i];
      slowest = std::max(slowest, total);
    }
    per_step.push_back(slowest / static_cast<double>(end - begin));
  }
  // An even count: the mean of the middle two.
  std::sort(per_step.begin(), per_step.end());
  return count % 2 == 1 ? per_step[count / 2]
                        : (per_step[count / 2 - 1] + per_step[count / 2]) / 2;
}

}  // namespace rdmaflow::bench
