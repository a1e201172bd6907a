// File: cost_model.h
// -----------------------------------------------------------------------------
// Stanza's placement question: of N ranks, how many (K) should train the
// fully connected part? The model of one synchronous step, with C = N - K
// convolutional ranks, each FC rank serving m = ceil(C / K) of them:
//
//   T(K) = conv                       conv forward + backward on one batch
//        + m * fc                     the FC rank's forward + backward
//        + 2 m * activation / bw      activations in, their gradients out,
//                                     over the FC rank's link
//        + max(AR(conv_params, C),    the two all-reduces run side by side
//              AR(fc_params, K))
//   AR(bytes, n) = 2 (n-1)/n * bytes / bw + 2 (n-1) * latency   (ring)
//
// and K maximizes samples per second, C * batch / T(K). Compute times come
// from timing the two parts on a batch, bandwidth and latency from timing
// the ring; see docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_LAYER_SEPARATED_COST_MODEL_H_
#define RDMAFLOW_STRATEGIES_LAYER_SEPARATED_COST_MODEL_H_

#include <cstdint>
#include <string>

namespace rdmaflow::strategies::layer_separated {

struct StanzaCosts {
  double conv_s = 0;            // conv forward + backward, one batch
  double fc_s = 0;              // FC forward + backward, one batch
  int64_t activation_bytes = 0; // one batch's activations (and labels)
  int64_t conv_param_bytes = 0;
  int64_t fc_param_bytes = 0;
  double bandwidth_bytes_per_s = 1e9;
  double latency_s = 10e-6;
};

// Seconds per step with `fc_ranks` of `ranks` on the FC part (1 <= fc_ranks
// < ranks).
double StepSeconds(const StanzaCosts& costs, int ranks, int fc_ranks);
// Seconds of a ring all-reduce of `bytes` over `n` ranks.
double RingSeconds(const StanzaCosts& costs, int64_t bytes, int n);

// The K in [1, ranks - 1] with the most samples per second (the smallest
// on ties). ranks >= 2.
int ChooseFcRanks(const StanzaCosts& costs, int ranks);

// "K=1: 12.3 ms/step, 5200 samples/s; K=2: ..." for logs.
std::string DescribeChoices(const StanzaCosts& costs, int ranks, int64_t batch);

}  // namespace rdmaflow::strategies::layer_separated

#endif  // RDMAFLOW_STRATEGIES_LAYER_SEPARATED_COST_MODEL_H_
