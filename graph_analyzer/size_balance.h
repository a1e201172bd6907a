// File: size_balance.h
// -----------------------------------------------------------------------------
// Spreads items of given sizes over bins by the greedy LPT rule: largest
// first (ties keep their order), each into the bin holding the least so far
// (ties: the lower bin); within 4/3 of the best balance. How parameter
// servers shard a model's tensors: the planner's placement (placement.h)
// and the ps strategy's runtime (strategies/ps/sharding.h) both use it, so
// the plan and the run agree.
#ifndef RDMAFLOW_GRAPH_ANALYZER_SIZE_BALANCE_H_
#define RDMAFLOW_GRAPH_ANALYZER_SIZE_BALANCE_H_

#include <cstdint>
#include <vector>

namespace rdmaflow::graph {

// The bin (0..bins-1) of each item. `bins` >= 1; negative sizes count as 0;
// the bins' sums saturate instead of overflowing.
std::vector<int> BalanceBySize(const std::vector<int64_t>& sizes, int bins);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_SIZE_BALANCE_H_
