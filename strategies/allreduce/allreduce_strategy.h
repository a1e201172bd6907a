// File: allreduce_strategy.h
// -----------------------------------------------------------------------------
// The synchronous data-parallel baseline ("allreduce"): every rank trains a
// replica on its own batches; the gradients (backward writes them into the
// ring's registered memory) are summed by the ring all-reduce in buckets,
// averaged, and every rank applies the same SGD step, so the replicas stay
// identical. Parameters: bucket_bytes (4M), chunk_bytes (256K), slots (8),
// overlap (on: each bucket is all-reduced as soon as backward has filled
// it, while backward goes on, bucket_pipeline.h; off: after backward;
// forward: as on, and part of the head's gradients, at most forward_bytes
// (auto: a third of the gradients; forward_buckets.h), is all-reduced
// during the next step's forward through the features, which the strategy
// runs itself from the model's split, StrategyContext::split).
// Given the model's training graph (StrategyContext::model), the gradients
// are fused and bucketed in the order backward completes them
// (graph_analyzer/gradient_order.h), with the sizes the plan gives them
// (parameters backward never reaches last); else in reverse parameter
// order (DDP's guess: backward runs the layers last to first).
// With a codec (StrategyOptions::codec) the fused gradients are sent
// through it whole, once a step (compression/compressed_allreduce.h).
// Without a codec it takes device parameters (StrategyContext::device): the fused
// gradients, parameters and momentum then stay on the device, reduced
// there (data_parallel.h); with overlap each bucket waits for an event
// recorded as backward queued its last gradient (bucket_pipeline.h), and
// overlap=forward runs a split of the device's copy on them
// (train/device_model.h, ResidentSplit).
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
#include "strategies/allreduce/forward_buckets.h"
#include "strategies/bucket_pipeline.h"
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
  // overlap=forward runs the model's halves itself (StrategyContext::split
  // and next_batch), and between steps the head's deferred buckets are not
  // yet applied: ShareModel() applies them.
  bool needs_compute_fn() const override { return !forward_; }
  bool runs_split() const override { return forward_; }
  bool holds_full_model() const override { return !forward_; }
  bool shares_model() const override { return forward_; }
  // Not with a codec, which encodes on the host. overlap=forward runs the
  // split of the device's copy (DeviceModel::ResidentSplit) on them.
  bool takes_device_parameters() const override { return options().codec.empty(); }
  bool exchanges_on_device() const override { return on_device_; }
  int workers() const override { return context().world_size; }
  int worker_index() const override { return context().rank; }
  runtime::TransferCounters counters() const override;
  bool compresses() const override { return true; }
  compression::CompressionStats compression() const override;
  // The parameters' names in the order their gradients are fused and
  // bucketed (from Prepare() on).
  std::vector<std::string> gradient_order() const;
  // Whether buckets are all-reduced while backward runs (from Start() on),
  // and how many began before their step's backward ended.
  bool overlaps() const { return pipeline_ != nullptr; }
  int64_t overlapped_buckets() const { return overlapped_buckets_; }
  // overlap=forward (from Start() on): how many parts of the group's
  // buckets are all-reduced during the next step's forward
  // (forward_buckets.h); how many of those had begun by the time the features' forward
  // returned, over the steps so far; and how many buckets' all-reduces
  // have begun in the step running now (any thread: for a test's features
  // to watch).
  int deferred_buckets() const { return static_cast<int>(deferred_.size()); }
  int64_t forward_overlapped_buckets() const { return forward_overlapped_; }
  int buckets_begun() const { return pipeline_ != nullptr ? pipeline_->buckets_begun() : 0; }

 private:
  // `parameters_` in the order the model's plan completes their gradients.
  absl::Status OrderAsPlanned(const graph::GraphDef& model);

  AllReduceStrategy(StrategyOptions options, DataParallelOptions group, bool overlap,
                    bool forward, int64_t forward_bytes)
      : Strategy(std::move(options)),
        group_options_(std::move(group)),
        overlap_(overlap),
        forward_(forward),
        forward_bytes_(forward_bytes) {}

  // overlap=forward: which bytes of the buckets wait for the next step
  // (deferred_) and which go in theirs (in_step_), and the pipeline over
  // both.
  // kFailedPrecondition unless the context has the split and next_batch
  // (in Prepare(), before anything connects).
  absl::Status CheckForwardContext() const;
  absl::Status StartForwardOverlap();
  absl::StatusOr<StepReport> ForwardOverlapStep();
  // The split's features, then (after the deferred buckets are in and
  // applied) its head, loss and backward on the next batch: overlap=forward's
  // compute. `features_end` and `head_begin` bound the wait for them.
  absl::StatusOr<ComputeResult> SplitCompute(bool pending, absl::Time& features_end,
                                             absl::Time& head_begin);
  // Scales and applies bucket `b`.
  void ApplyBucket(size_t b);
  // All-reduces and applies the deferred buckets still pending, on this
  // thread (between steps: ShareModel, Finish).
  absl::Status FlushDeferred();
  absl::Status DoShareModel() override { return FlushDeferred(); }

  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) override;
  absl::Status DoStart() override;
  absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) override;
  // After a failure the ring is unusable (collectives/ring_allreduce.h)
  // and the others may never come to its shutdown barrier: it is torn
  // down here alone.
  absl::Status DoFinish(bool after_failure) override;

  const DataParallelOptions group_options_;
  const bool overlap_;
  const bool forward_;  // overlap=forward
  const int64_t forward_bytes_;  // forward_buckets.h's budget
  std::vector<BucketPart> deferred_;  // of group buckets
  std::vector<BucketPart> in_step_;
  std::vector<size_t> applied_late_;  // buckets with a deferred part
  std::vector<size_t> applied_in_step_;
  bool pending_ = false;  // applied_late_ hold the last step's gradients
  int64_t forward_overlapped_ = 0;
  std::vector<Parameter> parameters_;
  std::unique_ptr<DataParallelGroup> group_;
  std::unique_ptr<BucketPipeline> pipeline_;  // overlap=on, without a codec
  int64_t overlapped_buckets_ = 0;
  bool on_device_ = false;  // the group's, kept after Finish()
  collectives::RingAllReduceStats final_stats_;  // kept past Finish()
  compression::CompressionStats final_compression_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_ALLREDUCE_ALLREDUCE_STRATEGY_H_
