#include "device/queued_work.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/poll_until.h"

namespace rdmaflow::device {

absl::Status QueuedWork::Mark(Stream& stream, std::unique_ptr<Event> event) {
  event_ = std::move(event);
  stream_ = &stream;
  if (event_ == nullptr) {
    return absl::FailedPreconditionError(
        "no event to mark the end of device work: it is waited for as its stream's idling");
  }
  absl::Status recorded = stream.Record(*event_);
  if (recorded.ok()) stream_ = nullptr;
  return recorded;
}

absl::StatusOr<bool> QueuedWork::Ended() {
  if (stream_ != nullptr) {
    if (event_ == nullptr || !stream_->Record(*event_).ok()) return stream_->Idle();
    stream_ = nullptr;  // marked now, after the work
  }
  if (event_ == nullptr) return true;
  return event_->Done();
}

absl::Status QueuedWork::WaitUntil(absl::Time deadline, const std::string& what) {
  absl::StatusOr<bool> ended = PollUntil([this] { return Ended(); }, deadline);
  if (!ended.ok()) return ended.status();
  if (*ended) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("device: ", what, " did not complete by its deadline",
                   unmarked() ? " (no event marks it, and its stream did not go idle)" : ""));
}

std::unique_ptr<Event> QueuedWork::Release() {
  std::unique_ptr<Event> event = std::move(event_);
  // Still unmarked: the device never took a Record of this event.
  if (std::exchange(stream_, nullptr) != nullptr) event.reset();
  return event;
}

}  // namespace rdmaflow::device
