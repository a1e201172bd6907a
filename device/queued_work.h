// File: queued_work.h
// -----------------------------------------------------------------------------
// QueuedWork: the end of device work just queued on a stream, for a caller
// that must not give the work's memory back before it. An event recorded
// right after the work marks it; where that Record fails, the work may run
// all the same, and only a later Record (tried again each time it is
// asked) or the stream going idle (Stream::Idle()) says it ended. So a
// failed Record never lets memory go while a copy into or out of it may
// still run.
//
//   QueuedWork copy;
//   RETURN_IF_ERROR(stream.Copy(to, from, bytes));  // refused: nothing queued
//   absl::Status marked = copy.Mark(stream, std::move(event));
//   ...
//   ASSIGN_OR_RETURN(const bool ended, copy.Ended());  // then the memory may go
//
// Thread-compatible. The stream must outlive the QueuedWork's last Ended().
#ifndef RDMAFLOW_DEVICE_QUEUED_WORK_H_
#define RDMAFLOW_DEVICE_QUEUED_WORK_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

class QueuedWork {
 public:
  // No work: Ended() at once.
  QueuedWork() = default;
  QueuedWork(QueuedWork&& other) noexcept
      : event_(std::move(other.event_)), stream_(std::exchange(other.stream_, nullptr)) {}
  QueuedWork& operator=(QueuedWork&& other) noexcept {
    event_ = std::move(other.event_);
    stream_ = std::exchange(other.stream_, nullptr);
    return *this;
  }

  // Marks the end of the work just queued on `stream` by recording `event`
  // there. The Record's error, if it failed, and kFailedPrecondition for a
  // null `event` (none could be made): the work is then watched through
  // the stream as long as it may run.
  absl::Status Mark(Stream& stream, std::unique_ptr<Event> event);
  // Whether there is work to wait for (Mark was called, and Release not).
  bool pending() const { return event_ != nullptr || stream_ != nullptr; }
  // Whether no event marks it (its Record failed, and no retry passed yet).
  bool unmarked() const { return stream_ != nullptr; }
  // True once the work ended (or there was none); the device's error,
  // which ends the work as well (a broken stream runs nothing more). While
  // unmarked, it records the event again first: a later point of the
  // stream covers the work before it, and the event says from then on.
  absl::StatusOr<bool> Ended();
  // Waits until Ended() or `deadline`: kDeadlineExceeded naming `what`.
  absl::Status WaitUntil(absl::Time deadline, const std::string& what);
  // Gives the event back for reuse and leaves no work: once Ended(), or
  // for work that may be dropped. Null if there was none, or if no Record
  // of it passed: an event the device refused may be a bad one, and is
  // dropped rather than pooled (each later use would fail the same way).
  std::unique_ptr<Event> Release();

 private:
  std::unique_ptr<Event> event_;
  Stream* stream_ = nullptr;  // set while no event marks the work
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_QUEUED_WORK_H_
