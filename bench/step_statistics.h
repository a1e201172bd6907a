// File: step_statistics.h
// -----------------------------------------------------------------------------
// The statistic of a multi-rank run's step times that the ablation compares
// (its percentiles are bench/pingpong.h's Percentile).
// `ranks[r][i]` is rank r's time of step i; a step of the job takes as long
// as its slowest rank. Ranks of different lengths count the steps all have.
//
//   double typical = MedianOfBlockMeans(ranks, 10);
#ifndef RDMAFLOW_BENCH_STEP_STATISTICS_H_
#define RDMAFLOW_BENCH_STEP_STATISTICS_H_

#include <vector>

namespace rdmaflow::bench {

// Cuts the steps into `blocks` consecutive blocks of (nearly) equal length;
// a block's time per step is its slowest rank's total over its length; the
// result is the median of those. A streaming estimate of the time a step
// costs that neither a sender running ahead of its receiver (bimodal steps,
// which fool the p50) nor a rare multi-millisecond preemption on a shared
// machine (which moves the mean) decides, provided a block is longer than
// the run-ahead. `blocks` is capped at the number of steps; 0 for no steps
// or blocks < 1.
double MedianOfBlockMeans(const std::vector<std::vector<double>>& ranks,
                          int blocks);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_STEP_STATISTICS_H_
