// File: bucket_pipeline.cc
#include "strategies/bucket_pipeline.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/poll_until.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies {

absl::StatusOr<std::unique_ptr<BucketPipeline>> BucketPipeline::Create(
    DataParallelGroup& group, onesided::ProgressLoop& loop) {
  if (!group.reduces_in_buckets()) {
    return absl::FailedPreconditionError(
        "the group does not all-reduce in buckets (a codec sends the gradients whole, or "
        "there are none): nothing to pipeline");
  }
  std::vector<std::vector<size_t>> buckets;
  for (int b = 0; b < group.buckets(); ++b) {
    const collectives::Bucket& bucket = group.bucket(static_cast<size_t>(b));
    buckets.emplace_back();
    for (size_t i = bucket.first; i < bucket.end; ++i) buckets.back().push_back(i);
  }
  return Create(
      group.parameters(), std::move(buckets),
      [&group](size_t b) { return group.AllReduceWrittenBucket(b); }, loop, "the all-reduce");
}

absl::StatusOr<std::unique_ptr<BucketPipeline>> BucketPipeline::Create(
    const std::vector<Parameter>& parameters, std::vector<std::vector<size_t>> buckets,
    std::function<absl::Status(size_t bucket)> communicate, onesided::ProgressLoop& loop,
    std::string what) {
  std::unique_ptr<BucketPipeline> pipeline(
      new BucketPipeline(parameters, std::move(communicate), loop, std::move(what)));
  pipeline->buckets_of_.assign(parameters.size(), {});
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t i : buckets[b]) {
      if (i >= parameters.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            pipeline->what_, "'s bucket ", b, " names parameter ", i, " of ",
            parameters.size()));
      }
      pipeline->buckets_of_[i].push_back(b);
    }
    pipeline->gradients_.push_back(static_cast<int>(buckets[b].size()));
  }
  BucketPipeline* self = pipeline.get();
  ASSIGN_OR_RETURN(pipeline->hooks_,
                   GradientHooks::Install(parameters, [self](size_t i) { self->GradientReady(i); }));
  return pipeline;
}

BucketPipeline::BucketPipeline(const std::vector<Parameter>& parameters,
                               std::function<absl::Status(size_t)> communicate,
                               onesided::ProgressLoop& loop, std::string what)
    : parameters_(parameters),
      communicate_(std::move(communicate)),
      what_(std::move(what)),
      communication_(loop, absl::StrCat(what_, "'s communication thread")) {}

BucketPipeline::~BucketPipeline() { hooks_.reset(); }

void BucketPipeline::GradientReady(size_t parameter) {
  absl::MutexLock lock(&mu_);
  // Outside Run() (an evaluation's backward, a test's) nothing is owed.
  if (!running_ || parameter >= buckets_of_.size()) return;
  if (seen_[parameter]) {
    // A second accumulation in one step (a compute that runs backward
    // twice): its bucket may be on the wire already, so its sum would be
    // wrong. No further bucket begins (the members waiting for them fail
    // on their deadline rather than go on with wrong sums), and the step
    // fails.
    if (twice_.empty()) twice_ = parameters_[parameter].name;
    abandon_ = true;
    return;
  }
  seen_[parameter] = true;
  for (size_t b : buckets_of_[parameter]) {
    // The bucket's last gradient: mark the device work that writes it
    // before the communication thread may see it due.
    if (missing_[b] == 1 && mark_ != nullptr) marks_[b] = mark_(b);
    --missing_[b];
  }
}

absl::Status BucketPipeline::AwaitMark(size_t b) {
  absl::StatusOr<ReadyPoll> mark;
  {
    absl::MutexLock lock(&mu_);
    mark = marks_[b];
  }
  const std::string which = absl::StrCat("bucket ", b, " of ", gradients_.size());
  if (!mark.ok()) {
    return absl::Status(mark.status().code(),
                        absl::StrCat("marking the device work of ", which, ": ",
                                     mark.status().message()));
  }
  if (*mark == nullptr) return absl::OkStatus();
  absl::StatusOr<bool> done = PollUntil(*mark, absl::Now() + mark_timeout_);
  if (!done.ok()) {
    return absl::Status(done.status().code(),
                        absl::StrCat("waiting for the device to write ", which, ": ",
                                     done.status().message()));
  }
  if (!*done) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the device did not finish writing the gradients of ", which, " in ",
        absl::FormatDuration(mark_timeout_), "; is the device hung?"));
  }
  return absl::OkStatus();
}

bool BucketPipeline::AwaitBucket(size_t b) {
  auto due = [this, b] {
    mu_.AssertHeld();  // Await() calls it under mu_
    return abandon_ || computed_ || (b < missing_.size() && missing_[b] == 0);
  };
  // No deadline: this thread's own compute sets abandon_ or computed_, on
  // every way out of Run().
  if (idle_ == nullptr) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&due));
    return !abandon_;
  }
  bool worked = false;  // the last idle_ call did something: call it again
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!worked) mu_.AwaitWithTimeout(absl::Condition(&due), kIdlePoll);
      if (due()) return !abandon_;
    }
    absl::StatusOr<bool> idle = idle_();
    if (!idle.ok()) {
      status_ = absl::Status(idle.status().code(),
                             absl::StrCat(what_, ", waiting for bucket ", b, " of ",
                                          gradients_.size(), ": ", idle.status().message()));
      return false;
    }
    worked = *idle;
  }
}

void BucketPipeline::CommunicateBuckets() {
  const size_t buckets = gradients_.size();
  for (size_t b = 0; b < buckets; ++b) {
    if (!AwaitBucket(b)) return;
    status_ = AwaitMark(b);
    if (!status_.ok()) return;
    bool overlapped = false;
    {
      absl::MutexLock lock(&mu_);
      // Compute may have failed during the device's wait: no bucket
      // begins after that.
      if (abandon_) return;
      overlapped = !computed_;
    }
    PipelinedStep::Span span;
    span.begin = absl::Now();  // before begun_ says so: a test compares them
    begun_.fetch_add(1, std::memory_order_release);
    status_ = communicate_(b);
    span.end = absl::Now();
    spans_.push_back(span);
    if (overlapped) ++overlapped_;
    if (status_.ok()) {
      absl::MutexLock lock(&mu_);
      ++communicated_;
    }
    if (!status_.ok()) {
      status_ = absl::Status(status_.code(), absl::StrCat("bucket ", b, " of ", buckets,
                                                          ": ", status_.message()));
      return;
    }
  }
  // Every bucket is on its way; the idle work goes on while compute runs.
  if (idle_ != nullptr) AwaitBucket(buckets);
}

absl::Status BucketPipeline::AwaitCommunicated(size_t b, absl::Time deadline) {
  if (b >= gradients_.size()) {
    return absl::OutOfRangeError(absl::StrCat(what_, " has ", gradients_.size(),
                                              " buckets; there is no bucket ", b));
  }
  absl::MutexLock lock(&mu_);
  auto settled = [this, b] {
    mu_.AssertHeld();  // AwaitWithDeadline() calls it under mu_
    return communicated_ > b || ended_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (communicated_ > b) return absl::OkStatus();
  const std::string which = absl::StrCat("bucket ", b, " of ", gradients_.size());
  if (!ended_) {
    return absl::DeadlineExceededError(absl::StrCat(
        what_, " of ", which,
        " did not return by the deadline; is a peer slow or gone? (its own timeout names the "
        "peer it waited for)"));
  }
  if (!ended_status_.ok()) return ended_status_;
  return absl::AbortedError(
      absl::StrCat(what_, "'s communication thread stopped before ", which));
}

absl::StatusOr<PipelinedStep> BucketPipeline::Run(const ComputeFn& compute) {
  {
    absl::MutexLock lock(&mu_);
    missing_ = gradients_;
    marks_.assign(gradients_.size(), ReadyPoll());
    seen_.assign(buckets_of_.size(), false);
    twice_.clear();
    computed_ = false;
    abandon_ = false;
    running_ = true;
    communicated_ = 0;
    ended_ = false;
    ended_status_ = absl::OkStatus();
  }
  status_ = absl::OkStatus();
  spans_.clear();
  overlapped_ = 0;
  begun_.store(0, std::memory_order_release);
  PipelinedStep step;
  if (absl::Status started = communication_.Start([this] {
        CommunicateBuckets();
        absl::MutexLock lock(&mu_);
        ended_ = true;
        ended_status_ = status_;
        return status_;
      });
      !started.ok()) {
    absl::MutexLock lock(&mu_);
    running_ = false;
    return started;
  }
  // Whatever way this returns (compute's error, an exception thrown
  // through it), the thread is released and joined, and the loop is ours
  // again.
  absl::Status communicated;
  absl::Cleanup join = [this, &communicated] {
    {
      absl::MutexLock lock(&mu_);
      if (!computed_) abandon_ = true;
      running_ = false;
    }
    communicated = communication_.Stop();
  };
  step.compute_begin = absl::Now();
  absl::StatusOr<ComputeResult> computed = compute();
  step.compute_end = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (computed.ok()) {
      // A bucket backward never completed (unused parameters, gradients
      // written some other way) may still be written by device work compute
      // queued: marked here, on compute's stream, before it falls due.
      if (mark_ != nullptr) {
        for (size_t b = 0; b < missing_.size(); ++b) {
          if (missing_[b] > 0) marks_[b] = mark_(b);
        }
      }
      computed_ = true;
    } else {
      abandon_ = true;
    }
  }
  std::move(join).Invoke();
  if (!computed.ok()) return computed.status();
  {
    absl::MutexLock lock(&mu_);
    if (!twice_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", twice_,
          "' had its gradient accumulated twice in one step (a compute that runs backward more "
          "than once): ", what_, " may have sent its bucket in between; train with overlap=off"));
    }
  }
  RETURN_IF_ERROR(communicated);
  step.compute = *computed;
  step.buckets = std::move(spans_);
  step.overlapped = overlapped_;
  return step;
}

}  // namespace rdmaflow::strategies
