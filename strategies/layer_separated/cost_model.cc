// File: cost_model.cc
#include "strategies/layer_separated/cost_model.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace rdmaflow::strategies::layer_separated {

double RingSeconds(const StanzaCosts& costs, int64_t bytes, int n) {
  if (n <= 1 || bytes == 0) return 0;
  return 2.0 * (n - 1) / n * bytes / costs.bandwidth_bytes_per_s +
         2.0 * (n - 1) * costs.latency_s;
}

double StepSeconds(const StanzaCosts& costs, int ranks, int fc_ranks) {
  const int conv_ranks = ranks - fc_ranks;
  const int served = (conv_ranks + fc_ranks - 1) / fc_ranks;
  return costs.conv_s + served * costs.fc_s +
         2.0 * served * costs.activation_bytes / costs.bandwidth_bytes_per_s +
         std::max(RingSeconds(costs, costs.conv_param_bytes, conv_ranks),
                  RingSeconds(costs, costs.fc_param_bytes, fc_ranks));
}

int ChooseFcRanks(const StanzaCosts& costs, int ranks) {
  int best = 1;
  double best_rate = 0;
  for (int k = 1; k < ranks; ++k) {
    const double rate = (ranks - k) / StepSeconds(costs, ranks, k);
    if (rate > best_rate * (1 + 1e-9)) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

std::string DescribeChoices(const StanzaCosts& costs, int ranks, int64_t batch) {
  std::string out;
  for (int k = 1; k < ranks; ++k) {
    const double step = StepSeconds(costs, ranks, k);
    absl::StrAppendFormat(&out, "%sK=%d: %.2f ms/step, %.0f samples/s",
                          k == 1 ? "" : "; ", k, step * 1e3,
                          (ranks - k) * batch / step);
  }
  return out;
}

}  // namespace rdmaflow::strategies::layer_separated
