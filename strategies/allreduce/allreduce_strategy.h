// File: allreduce_strategy.h
// -----------------------------------------------------------------------------
// The synchronous data-parallel baseline ("allreduce"): every rank trains a
// replica on its own batches; after backward the gradients (already in the
// ring's registered memory) are summed by the ring all-reduce in buckets,
// averaged, and every rank applies the same SGD step, so the replicas stay
// identical. Parameters: bucket_bytes (4M), chunk_bytes (256K), slots (8).
// A replica slower than the timeout fails its peers' all-reduce with
// kDeadlineExceeded naming the neighbour the ring waited for; after any
// failed step the strategy is unusable (Step() returns kFailedPrecondition
// quoting the failure) and Finish() tears it down without waiting for the
// other ranks, returning that failure.
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_ALLREDUCE_ALLREDUCE_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_ALLREDUCE_ALLREDUCE_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strategies/data_parallel.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

// Thread-compatible: one thread drives a rank's strategy.
class AllReduceStrategy final : public Strategy {
 public:
  // kInvalidArgument for bad parameters or options.
  static absl::StatusOr<std::unique_ptr<AllReduceStrategy>> Create(
      const StrategyOptions& options);

  std::string name() const override { return "allreduce"; }
  std::string role() const override { return "replica"; }
  bool computes() const override { return true; }
  int workers() const override { return context_.world_size; }
  int worker_index() const override { return context_.rank; }
  absl::StatusOr<graph::GraphDef> Prepare(const StrategyContext& context,
                                          std::vector<Parameter> parameters) override;
  absl::Status Start() override;
  absl::StatusOr<StepReport> Step(const ComputeFn& compute) override;
  bool done() const override { return clock_ >= options_.steps; }
  absl::Status Finish() override;
  runtime::TransferCounters counters() const override;

 private:
  AllReduceStrategy(StrategyOptions options, DataParallelOptions group)
      : options_(std::move(options)), group_options_(std::move(group)) {}

  const StrategyOptions options_;
  const DataParallelOptions group_options_;
  StrategyContext context_;
  std::vector<Parameter> parameters_;
  std::unique_ptr<DataParallelGroup> group_;
  collectives::RingAllReduceStats final_stats_;  // kept past Finish()
  int64_t clock_ = 0;
  bool finished_ = false;
  absl::Status failure_;  // of the step that failed; the group is unusable
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_ALLREDUCE_ALLREDUCE_STRATEGY_H_
