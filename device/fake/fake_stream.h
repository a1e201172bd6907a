// File: fake_stream.h
// -----------------------------------------------------------------------------
// The fake device's streams and events (device/fake/fake_device.h): a
// stream is a thread running its queue in order; each enqueued operation
// takes the next sequence number, and an event holds (stream, number).
#ifndef RDMAFLOW_DEVICE_FAKE_FAKE_STREAM_H_
#define RDMAFLOW_DEVICE_FAKE_FAKE_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

class FakeDevice;

// How far a stream got: shared by the stream and the events recorded on
// it, which may outlive it. Thread-safe.
class FakeStreamState {
 public:
  // Whether operation `sequence` (and all before it) ran; the stream's
  // error if one before or at it failed.
  absl::StatusOr<bool> Reached(uint64_t sequence) const;
  // Blocks until Reached(sequence) is not false, or `stop` says to give up
  // (checked every few milliseconds). OK once reached; the error; or
  // kCancelled when stopped.
  absl::Status Await(uint64_t sequence, const std::function<bool()>& stop) const;
  void Ran(uint64_t sequence, const absl::Status& status);
  // The first failure (OK while none).
  absl::Status error() const;

 private:
  mutable absl::Mutex mu_;
  mutable absl::CondVar ran_changed_;
  uint64_t ran_ ABSL_GUARDED_BY(mu_) = 0;
  // The first failure, and the operation that failed.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t failed_at_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeEvent final : public Event {
 public:
  explicit FakeEvent(const FakeDevice* runtime) : runtime_(runtime) {}
  absl::StatusOr<bool> Done() override;

  const FakeDevice* runtime() const { return runtime_; }
  void Set(std::shared_ptr<const FakeStreamState> state, uint64_t sequence) {
    state_ = std::move(state);
    sequence_ = sequence;
  }
  // The recorded point (null state: never recorded).
  const std::shared_ptr<const FakeStreamState>& state() const { return state_; }
  uint64_t sequence() const { return sequence_; }

 private:
  const FakeDevice* const runtime_;
  std::shared_ptr<const FakeStreamState> state_;
  uint64_t sequence_ = 0;
};

class FakeStream final : public Stream {
 public:
  explicit FakeStream(FakeDevice* runtime);
  // Runs what is queued, as CUDA finishes a destroyed stream's work, then
  // stops the thread. A WaitFor still waiting then gives up (kCancelled).
  ~FakeStream() override;

  absl::Status Copy(void* dst, const void* src, size_t bytes) override;
  absl::Status Zero(void* dst, size_t bytes) override;
  absl::Status Reduce(const ReduceArgs& args) override;
  absl::Status Record(Event& event) override;
  absl::Status WaitFor(Event& event) override;
  absl::StatusOr<bool> Idle() override;
  void* native_handle() const override { return const_cast<FakeStream*>(this); }
  // Returns once everything enqueued so far has run (or the stream stops).
  void Drain();

 private:
  // Queues `run` as the next operation.
  void Enqueue(std::function<absl::Status()> run);
  absl::StatusOr<FakeEvent*> Ours(Event& event);
  void Loop();

  FakeDevice* const runtime_;
  const std::shared_ptr<FakeStreamState> state_ = std::make_shared<FakeStreamState>();
  absl::Mutex mu_;
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Another's FakeStream (FakeDevice::WrapStream): forwards to it, owns
// nothing. The stream must outlive the view, as with a wrapped CUDA stream.
class FakeStreamView final : public Stream {
 public:
  explicit FakeStreamView(FakeStream* stream) : stream_(stream) {}
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    return stream_->Copy(dst, src, bytes);
  }
  absl::Status Zero(void* dst, size_t bytes) override { return stream_->Zero(dst, bytes); }
  absl::Status Reduce(const ReduceArgs& args) override { return stream_->Reduce(args); }
  absl::Status Record(Event& event) override { return stream_->Record(event); }
  absl::Status WaitFor(Event& event) override { return stream_->WaitFor(event); }
  absl::StatusOr<bool> Idle() override { return stream_->Idle(); }
  void* native_handle() const override { return stream_; }

 private:
  FakeStream* const stream_;
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_FAKE_FAKE_STREAM_H_
