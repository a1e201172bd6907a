// File: forward_overlap_step.cc
// The allreduce strategy's overlap=forward (see the header): part of the
// head's gradients (forward_buckets.h: a budget taken from the buckets
// backward completes last) is all-reduced while the next step's forward
// runs through the features, as P3 (Jayarajan et al.,
// SysML 2019) and ByteScheduler (Peng et al., SOSP 2019) order a step's
// communication by when the next forward needs it.
//
// A step, with D deferred parts of buckets (forward_buckets.h):
//   communication thread: the D deferred parts of the last step, then
//     this step's other parts in bucket order, each once backward has
//     completed its bucket (bucket_pipeline.h);
//   this thread: the features' forward; then it waits for the D parts,
//     scales and applies SGD to the buckets they belong to, zeroes their
//     gradients; then the head's forward, the loss and backward.
// After the pipeline the step applies the buckets all-reduced whole in it;
// those with a deferred part stay pending until the next step,
// ShareModel() or Finish(). Every
// parameter thus gets the same update, from the same sums, before the
// forward that reads it, as without overlap: only the order in which the
// ring reduces the buckets changes, the same on every rank (and, in a
// bucket cut in two, the order in which it adds the ranks' floats: the
// same sums up to rounding).
#include <algorithm>

#include "ATen/ops/cross_entropy_loss.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/allreduce/forward_buckets.h"
#include "strategies/device_tensors.h"
#include "strategies/exception_text.h"

namespace rdmaflow::strategies {

absl::Status AllReduceStrategy::CheckForwardContext() const {
  const ModelSplit* split = context().split;
  const char* missing = split == nullptr || split->features == nullptr || split->head == nullptr
                            ? "no split (the model's features and head)"
                        : context().next_batch == nullptr ? "no next_batch"
                                                          : nullptr;
  if (missing == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      Where(), ": overlap=forward runs the model's features and head itself and needs the "
               "model cut before its first fully connected layer (the trainer's split) and "
               "the next batch; this context has ",
      missing, " (use overlap=on)"));
}

absl::Status AllReduceStrategy::StartForwardOverlap() {
  if (!group_->reduces_in_buckets()) return absl::OkStatus();  // no gradients
  const std::vector<Parameter>& parameters = group_->parameters();
  const std::vector<std::string>& head_names = context().split->head_parameters;
  std::vector<bool> head;
  for (const Parameter& p : parameters) {
    head.push_back(std::find(head_names.begin(), head_names.end(), p.name) != head_names.end());
  }
  std::vector<collectives::Bucket> all_buckets;
  for (int b = 0; b < group_->buckets(); ++b) {
    all_buckets.push_back(group_->bucket(static_cast<size_t>(b)));
  }
  ForwardSchedule schedule = ScheduleForForward(all_buckets, head, forward_bytes_);
  deferred_ = std::move(schedule.deferred);
  in_step_ = std::move(schedule.in_step);
  applied_late_ = std::move(schedule.applied_late);
  applied_in_step_ = std::move(schedule.applied_in_step);
  // The pipeline's buckets: the deferred parts first (no gradients of this
  // step: due at once), then this step's, each due once backward has
  // completed its bucket.
  std::vector<std::vector<size_t>> buckets(deferred_.size());
  for (const BucketPart& part : in_step_) {
    const collectives::Bucket& bucket = group_->bucket(part.bucket);
    buckets.emplace_back();
    for (size_t i = bucket.first; i < bucket.end; ++i) buckets.back().push_back(i);
  }
  ASSIGN_OR_RETURN(
      pipeline_,
      BucketPipeline::Create(
          parameters, std::move(buckets),
          [this](size_t k) -> absl::Status {
            if (k < deferred_.size() && !pending_) return absl::OkStatus();
            const BucketPart& part =
                k < deferred_.size() ? deferred_[k] : in_step_[k - deferred_.size()];
            return group_->AllReduceWrittenPart(part.bucket, part.begin, part.bytes);
          },
          links().loop(), "the all-reduce"));
  return absl::OkStatus();
}

void AllReduceStrategy::ApplyBucket(size_t b) {
  group_->ApplySgdToBucket(b, 1.0 / context().world_size, options().learning_rate,
                           options().momentum);
}

absl::Status AllReduceStrategy::FlushDeferred() {
  if (!pending_) return absl::OkStatus();
  for (const BucketPart& part : deferred_) {
    RETURN_IF_ERROR(group_->AllReduceWrittenPart(part.bucket, part.begin, part.bytes));
  }
  for (size_t b : applied_late_) ApplyBucket(b);
  pending_ = false;
  if (context().split->parameters_changed) context().split->parameters_changed();
  return absl::OkStatus();
}

absl::StatusOr<ComputeResult> AllReduceStrategy::SplitCompute(bool pending,
                                                              absl::Time& features_end,
                                                              absl::Time& head_begin) {
  const ModelSplit& split = *context().split;
  ASSIGN_OR_RETURN(Batch batch, context().next_batch());
  at::Tensor activations;
  try {
    activations = split.features(batch.x);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": the model's features failed: ", ExceptionText(e)));
  }
  // On a device the features' kernels are queued, not done: the step's
  // timeline counts them as compute until they are (the deferred buckets
  // go on meanwhile).
  RETURN_IF_ERROR(SynchronizeTorchStream(activations.device()));
  features_end = absl::Now();
  head_begin = features_end;
  if (pending) {
    forward_overlapped_ +=
        std::min<int64_t>(pipeline_->buckets_begun(), static_cast<int64_t>(deferred_.size()));
    const absl::Time deadline = absl::Now() + 2 * options().communicator_options.timeout;
    for (size_t k = 0; k < deferred_.size(); ++k) {
      RETURN_IF_ERROR(pipeline_->AwaitCommunicated(k, deadline));
    }
    // The wait ends here; applying the sums is the step's compute.
    head_begin = absl::Now();
    for (size_t b : applied_late_) {
      ApplyBucket(b);
      group_->ZeroBucketGradients(b);
    }
    if (split.parameters_changed) split.parameters_changed();
  }
  ComputeResult result{0, 0, batch.x.size(0)};
  at::Tensor accuracy, loss_value;
  try {
    // On a device's split (DeviceModel::ResidentSplit) the logits are the
    // device's: the labels go there.
    at::Tensor logits = split.head(activations);
    const at::Tensor labels = batch.y.to(logits.device());
    at::Tensor loss = at::cross_entropy_loss(logits, labels);
    loss.backward();
    // Read after the wait below (on a device).
    accuracy = logits.argmax(1).eq(labels).to(at::kFloat).mean();
    loss_value = loss.detach();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": the model's head, loss or backward failed: ", ExceptionText(e)));
  }
  // Backward's device work, complete: the deferred buckets' gradients
  // have no ready marks (their all-reduce begins the next step, at once);
  // the step's own buckets wait for theirs.
  RETURN_IF_ERROR(SynchronizeTorchStream(loss_value.device()));
  try {
    result.loss = loss_value.item<double>();
    result.accuracy = accuracy.item<double>();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(
        Where(), ": reading the loss from ", loss_value.device().str(), ": ", ExceptionText(e)));
  }
  return result;
}

absl::StatusOr<StepReport> AllReduceStrategy::ForwardOverlapStep() {
  StepReport report;
  report.clock = clock();
  report.min_clock = clock();
  const bool pending = pending_;
  if (pipeline_ == nullptr) {  // no gradients: nothing to reduce
    absl::Time features_end, head_begin;
    const absl::Time begin = absl::Now();
    ASSIGN_OR_RETURN(report.compute, SplitCompute(false, features_end, head_begin));
    report.Add(StepSpan::Kind::kCompute, begin, absl::Now());
    return report;
  }
  // The buckets with a deferred part hold the last step's sums (and, in
  // that part, its gradients) until they are applied (inside the compute);
  // the others are this step's.
  if (pending) {
    for (size_t b : applied_in_step_) group_->ZeroBucketGradients(b);
  } else {
    group_->ZeroGradients();
  }
  absl::Time features_end, head_begin;
  // pending_ is read on the communication thread (the deferred buckets'
  // work) and changes only outside Run(), which starts and joins it.
  ASSIGN_OR_RETURN(PipelinedStep step, pipeline_->Run([&] {
                     return SplitCompute(pending, features_end, head_begin);
                   }));
  const absl::Time reduced = absl::Now();
  report.compute = step.compute;
  report.Add(StepSpan::Kind::kCompute, step.compute_begin, features_end);
  if (head_begin > features_end) report.Add(StepSpan::Kind::kWait, features_end, head_begin);
  report.Add(StepSpan::Kind::kCompute, head_begin, step.compute_end);
  for (size_t k = 0; k < step.buckets.size(); ++k) {
    // A deferred bucket with nothing pending (the first step) did nothing.
    if (k < deferred_.size() && !pending) continue;
    report.Add(StepSpan::Kind::kCommunication, step.buckets[k].begin, step.buckets[k].end);
  }
  if (reduced > step.compute_end) report.Add(StepSpan::Kind::kWait, step.compute_end, reduced);
  // Without anything pending the deferred buckets began, and did nothing.
  const int idle_deferred =
      pending ? 0 : std::min<int>(step.overlapped, static_cast<int>(deferred_.size()));
  overlapped_buckets_ += step.overlapped - idle_deferred;
  for (size_t b : applied_in_step_) ApplyBucket(b);
  pending_ = !deferred_.empty();
  if (context().split->parameters_changed) context().split->parameters_changed();
  return report;
}

}  // namespace rdmaflow::strategies
