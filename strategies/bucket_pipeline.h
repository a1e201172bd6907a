// File: bucket_pipeline.h
// -----------------------------------------------------------------------------
// BucketPipeline: a data-parallel group's gradients all-reduced while
// backward still runs (issue 48, "overlap"). Each bucket of the group
// (data_parallel.h: parameters fused in the order backward completes them,
// when the strategy had the model's plan) is summed as soon as backward has
// accumulated the last of its gradients (gradient_hooks.h), on a
// communication thread, while backward goes on with the next layers on the
// caller's; the step waits only for the buckets still in flight when
// backward ends. DDP and Horovod overlap the same way.
//
//   ASSIGN_OR_RETURN(auto pipeline, BucketPipeline::Create(*group, links.loop()));
//   group->ZeroGradients();
//   ASSIGN_OR_RETURN(PipelinedStep step, pipeline->Run(compute));
//   group->ScaleGradients(1.0 / members);
//
// Every member reduces the buckets in the same order, 0, 1, 2, ...: bucket
// k waits for its own gradients even when a later one is complete first,
// so the collectives match across members whatever each backward's order.
// A bucket backward never reaches (parameters forward does not use, or a
// compute that accumulates its gradients some other way, as a staged --device cuda
// does after backward) is reduced once compute has returned.
//
// The same pipeline serves any strategy that sends gradients in pieces as
// backward completes them: the general Create() takes each bucket's
// parameters (a parameter may be in several: the parameter server cuts its
// shards into slices that split tensors) and what to do with a bucket once
// it is complete (the parameter server pushes a slice to its server).
//
// Threads: the progress loop is handed to the communication thread for the
// step (ProgressLoop::AdoptOnCurrentThread) and back to the caller before
// Run() returns; the caller must not use the loop, its transport or the
// group in between, which compute (forward and backward of the model) does
// not. The hooks run on the thread that runs backward: they count, and
// with ready marks they record a bucket's mark (set_ready_marks).
#ifndef RDMAFLOW_STRATEGIES_BUCKET_PIPELINE_H_
#define RDMAFLOW_STRATEGIES_BUCKET_PIPELINE_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "onesided/progress/progress_loop.h"
#include "strategies/communication_thread.h"
#include "strategies/data_parallel.h"
#include "strategies/gradient_hooks.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

// What one pipelined step did, and when.
struct PipelinedStep {
  ComputeResult compute;
  absl::Time compute_begin;
  absl::Time compute_end;
  // Each bucket's all-reduce, in bucket order.
  struct Span {
    absl::Time begin;
    absl::Time end;
  };
  std::vector<Span> buckets;
  // Buckets whose all-reduce began before compute returned.
  int overlapped = 0;
};

// Thread-compatible: one thread calls Run() at a time.
class BucketPipeline {
 public:
  // Hooks `group`'s parameters (GradientHooks::Install's errors);
  // kFailedPrecondition when the group does not reduce in buckets (a
  // codec). `group` and `loop` (the one its all-reduce runs on) must
  // outlive the pipeline.
  static absl::StatusOr<std::unique_ptr<BucketPipeline>> Create(
      DataParallelGroup& group, onesided::ProgressLoop& loop);
  // The general form: bucket b holds the parameters `buckets[b]` (indices
  // into `parameters`) and is handed to `communicate(b)` on the
  // communication thread, in order, once they are all accumulated.
  // GradientHooks::Install's errors; kInvalidArgument for an index out of
  // range. `parameters` must outlive the pipeline; `what` names it in
  // errors ("the all-reduce").
  static absl::StatusOr<std::unique_ptr<BucketPipeline>> Create(
      const std::vector<Parameter>& parameters, std::vector<std::vector<size_t>> buckets,
      std::function<absl::Status(size_t bucket)> communicate, onesided::ProgressLoop& loop,
      std::string what);
  ~BucketPipeline();

  // Optional work for the communication thread while it has no bucket to
  // communicate and compute has not returned (waiting for backward to
  // complete the next bucket, and after the last one): the parameter
  // server pulls the next step's slices there. `idle` returns true when it
  // did something (it is called again at once), false when it had nothing
  // to do (it is called again after a bucket is due, compute returned, or
  // kIdlePoll passed). Its error fails the step as a bucket's would. Set it
  // before the first Run(); it may use the loop, as the buckets' work does.
  static constexpr absl::Duration kIdlePoll = absl::Milliseconds(1);
  void set_idle(std::function<absl::StatusOr<bool>()> idle) { idle_ = std::move(idle); }

  // Gradients a device writes (device parameters): a hook fires once the
  // accumulation is queued, not done. `mark(b)`, called on backward's
  // thread as bucket b's last gradient is in, marks the work queued so far (a
  // device event: device_tensors.h, MarkTorchWork) and returns a poll that
  // is true once it is complete, or null when nothing is left to wait for
  // (a bucket still incomplete when compute returns is marked then, on
  // compute's thread);
  // the communication thread polls it before it hands the bucket on, at
  // most `timeout` (then the step fails with kDeadlineExceeded naming the
  // bucket). Its error fails the step. Set it before the first Run(),
  // never during one.
  using ReadyPoll = std::function<absl::StatusOr<bool>()>;
  void set_ready_marks(std::function<absl::StatusOr<ReadyPoll>(size_t bucket)> mark,
                       absl::Duration timeout) {
    mark_ = std::move(mark);
    mark_timeout_ = timeout;
  }

  // Runs `compute` on this thread while the buckets are all-reduced as
  // backward fills them; returns once every bucket is summed (not scaled).
  // `compute` must run backward once: a gradient accumulated twice in one
  // step is kFailedPrecondition naming the parameter (its bucket may have
  // gone before the second accumulation). Errors: compute's (the buckets
  // not yet begun are never begun; the members waiting for them fail on
  // their deadline, as when compute fails without a pipeline), or the first
  // failed all-reduce's. After an error the group is unusable, as after a
  // failed AllReduceGradients().
  absl::StatusOr<PipelinedStep> Run(const ComputeFn& compute);

  // For a compute that needs a bucket's result before it goes on (the
  // allreduce strategy's overlap=forward waits for the head's buckets of
  // the last step before the head's forward): blocks until bucket `b`'s
  // communication has returned. OK then; the communication thread's error
  // if it failed (or stopped: compute failed) first; kDeadlineExceeded at
  // `deadline`; kOutOfRange for a bucket it does not have. Only from
  // compute, during Run().
  absl::Status AwaitCommunicated(size_t b, absl::Time deadline);

  // Buckets whose all-reduce has begun in the current (or last) Run():
  // for a compute that wants to see the overlap happen (tests). Any thread.
  int buckets_begun() const { return begun_.load(std::memory_order_acquire); }

 private:
  BucketPipeline(const std::vector<Parameter>& parameters,
                 std::function<absl::Status(size_t)> communicate, onesided::ProgressLoop& loop,
                 std::string what);
  // A gradient is in (a hook, on backward's thread).
  void GradientReady(size_t parameter);
  // The communication thread's work: every bucket, in order, then idle_
  // until compute returns.
  void CommunicateBuckets();
  // Waits until bucket `b` is due (b == buckets: until compute returned),
  // running idle_ meanwhile. False when the step was abandoned or idle_
  // failed (status_ says which).
  bool AwaitBucket(size_t b);
  // Polls bucket `b`'s mark, if it has one, until the work it marked is
  // complete (set_ready_marks). Its error or the timeout's.
  absl::Status AwaitMark(size_t b);

  const std::vector<Parameter>& parameters_;
  const std::function<absl::Status(size_t)> communicate_;
  const std::string what_;
  std::function<absl::StatusOr<bool>()> idle_;
  std::function<absl::StatusOr<ReadyPoll>(size_t)> mark_;
  absl::Duration mark_timeout_;
  CommunicationThread communication_;
  std::unique_ptr<GradientHooks> hooks_;
  std::vector<std::vector<size_t>> buckets_of_;  // by parameter
  std::vector<int> gradients_;     // by bucket: how many parameters it has

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> missing_ ABSL_GUARDED_BY(mu_);  // by bucket, this step
  std::vector<bool> seen_ ABSL_GUARDED_BY(mu_);    // by parameter, this step
  std::string twice_ ABSL_GUARDED_BY(mu_);  // a parameter accumulated twice
  // By bucket, this step: its mark (set_ready_marks), or the mark's error.
  std::vector<absl::StatusOr<ReadyPoll>> marks_ ABSL_GUARDED_BY(mu_);
  bool computed_ ABSL_GUARDED_BY(mu_) = false;     // compute returned
  // This step: buckets whose communication returned OK, and the
  // communication thread's end (its status then).
  size_t communicated_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ended_status_ ABSL_GUARDED_BY(mu_);
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;      // compute failed
  // The communication thread's results, read after it is joined.
  absl::Status status_;
  std::vector<PipelinedStep::Span> spans_;
  int overlapped_ = 0;
  std::atomic<int> begun_{0};
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_BUCKET_PIPELINE_H_
