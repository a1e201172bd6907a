#include "device/fake/fake_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"
#include "common/status_macros.h"
#include "device/fake/fake_device.h"

namespace rdmaflow::device {
namespace {

// Element i of a float32, float16 or bfloat16 array, as float.
float Load(collectives::DataType type, const void* data, size_t i) {
  switch (type) {
    case collectives::DataType::kFloat16:
      return collectives::HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case collectives::DataType::kBFloat16:
      return collectives::BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void Store(collectives::DataType type, void* data, size_t i, float value) {
  switch (type) {
    case collectives::DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = collectives::FloatToHalf(value);
      return;
    case collectives::DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = collectives::FloatToBFloat16(value);
      return;
    default:
      static_cast<float*>(data)[i] = value;
  }
}

// What the CUDA kernel computes (device/cuda/reduce_kernels.cu): each
// element accumulated in float32 over the sources in order, rounded once.
void ReduceOnHost(const ReduceArgs& args) {
  const bool sum = args.op == collectives::ReduceOp::kSum;
  for (size_t i = 0; i < args.count; ++i) {
    float acc = Load(args.type, args.srcs[0], i);
    for (size_t s = 1; s < args.srcs.size(); ++s) {
      const float v = Load(args.type, args.srcs[s], i);
      acc = sum ? acc + v : (v > acc ? v : acc);
    }
    Store(args.type, args.dst, i, acc);
  }
}

// A slow device: the operation's delay, in small sleeps.
void Delay(absl::Duration delay) {
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
}

}  // namespace

absl::StatusOr<bool> FakeStreamState::Reached(uint64_t sequence) const {
  absl::MutexLock lock(&mu_);
  if (!error_.ok() && failed_at_ <= sequence) return error_;
  return ran_ >= sequence;
}

absl::Status FakeStreamState::Await(uint64_t sequence, const std::function<bool()>& stop) const {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!error_.ok() && failed_at_ <= sequence) return error_;
    if (ran_ >= sequence) return absl::OkStatus();
    if (stop()) return absl::CancelledError("the waiting stream was destroyed");
    ran_changed_.WaitWithTimeout(&mu_, absl::Milliseconds(5));
  }
}

absl::Status FakeStreamState::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void FakeStreamState::Ran(uint64_t sequence, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ran_ = sequence;
  if (!status.ok() && error_.ok()) {
    error_ = status;
    failed_at_ = sequence;
  }
  ran_changed_.SignalAll();
}

absl::StatusOr<bool> FakeEvent::Done() {
  if (state_ == nullptr) return true;
  return state_->Reached(sequence_);
}

FakeStream::FakeStream(FakeDevice* runtime) : runtime_(runtime) {
  thread_ = std::thread([this] { Loop(); });
  runtime_->AddStream(this);
}

FakeStream::~FakeStream() {
  runtime_->RemoveStream(this);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void FakeStream::Drain() {
  uint64_t enqueued;
  {
    absl::MutexLock lock(&mu_);
    enqueued = enqueued_;
  }
  // A failed operation ends the wait as well: the work has stopped.
  state_->Await(enqueued, [this] {
    absl::MutexLock lock(&mu_);
    return stop_;
  }).IgnoreError();
}

void FakeStream::Enqueue(std::function<absl::Status()> run) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(run));
  ++enqueued_;
}

void FakeStream::Loop() {
  uint64_t sequence = 0;
  while (true) {
    std::function<absl::Status()> run;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FakeStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stop_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and drained
      run = std::move(queue_.front());
      queue_.pop_front();
    }
    runtime_->AwaitResumed();
    // Broken for good, as a sticky CUDA error ends its context's work: what
    // was queued behind the failure fails with it and touches no memory (a
    // caller told of the failure may free or unmap what it would have used).
    const absl::Status broken = state_->error();
    state_->Ran(++sequence, broken.ok() ? run() : broken);
  }
}

absl::Status FakeStream::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("fake device copy: a null pointer");
  }
  RETURN_IF_ERROR(runtime_->CheckRange(dst, bytes, "copy destination"));
  RETURN_IF_ERROR(runtime_->CheckRange(src, bytes, "copy source"));
  absl::Status fault;
  RETURN_IF_ERROR(runtime_->CountOperation(&fault));
  const absl::Duration delay = runtime_->operation_delay();
  Enqueue([dst, src, bytes, fault, delay] {
    Delay(delay);
    if (!fault.ok()) return fault;
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status FakeStream::Zero(void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("fake device zero: a null pointer");
  RETURN_IF_ERROR(runtime_->CheckRange(dst, bytes, "zero destination"));
  // Not a copy or a reduction: fail_operation does not count it (a fault
  // injected into the Nth copy stays there when allocations zero memory).
  const absl::Duration delay = runtime_->operation_delay();
  Enqueue([dst, bytes, delay] {
    Delay(delay);
    std::memset(dst, 0, bytes);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status FakeStream::Reduce(const ReduceArgs& args) {
  RETURN_IF_ERROR(CheckReduceArgs(args));
  if (args.count == 0) return absl::OkStatus();
  const size_t bytes = args.count * collectives::ElementSize(args.type);
  if (bytes / collectives::ElementSize(args.type) != args.count) {
    return absl::InvalidArgumentError("fake device reduce: the element count overflows");
  }
  RETURN_IF_ERROR(runtime_->CheckRange(args.dst, bytes, "reduce destination"));
  for (const void* src : args.srcs) {
    RETURN_IF_ERROR(runtime_->CheckRange(src, bytes, "reduce source"));
  }
  absl::Status fault;
  RETURN_IF_ERROR(runtime_->CountOperation(&fault));
  const absl::Duration delay = runtime_->operation_delay();
  Enqueue([args, fault, delay] {
    Delay(delay);
    if (!fault.ok()) return fault;
    ReduceOnHost(args);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::StatusOr<FakeEvent*> FakeStream::Ours(Event& event) {
  auto* fake = dynamic_cast<FakeEvent*>(&event);
  if (fake == nullptr || fake->runtime() != runtime_) {
    return absl::InvalidArgumentError(
        absl::StrCat("an event of another runtime used on a stream of ", runtime_->name()));
  }
  return fake;
}

absl::Status FakeStream::Record(Event& event) {
  ASSIGN_OR_RETURN(FakeEvent * fake, Ours(event));
  RETURN_IF_ERROR(runtime_->NextRecordFault());
  absl::MutexLock lock(&mu_);
  fake->Set(state_, enqueued_);
  return absl::OkStatus();
}

absl::Status FakeStream::WaitFor(Event& event) {
  ASSIGN_OR_RETURN(FakeEvent * fake, Ours(event));
  std::shared_ptr<const FakeStreamState> state = fake->state();
  if (state == nullptr || state == state_) return absl::OkStatus();  // nothing, or in order
  const uint64_t sequence = fake->sequence();
  Enqueue([this, state, sequence] {
    return state->Await(sequence, [this] {
      absl::MutexLock lock(&mu_);
      return stop_;
    });
  });
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeStream::Idle() {
  uint64_t enqueued;
  {
    absl::MutexLock lock(&mu_);
    enqueued = enqueued_;
  }
  return state_->Reached(enqueued);
}

}  // namespace rdmaflow::device
