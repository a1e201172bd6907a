#include "device/queued_work.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/poll_until.h"

namespace rdmaflow::device {

absl::Status QueuedWork::Mark(Stream& stream, std::unique_ptr<Event> event) {
  event_ = std::move(event);
  stream_ = nullptr;
  absl::Status recorded = stream.Record(*event_);
  if (!recorded.ok()) stream_ = &stream;
  return recorded;
}

absl::StatusOr<bool> QueuedWork::Ended() {
  if (event_ == nullptr) return true;
  return stream_ != nullptr ? stream_->Idle() : event_->Done();
}

absl::Status QueuedWork::WaitUntil(absl::Time deadline, const std::string& what) {
  if (event_ == nullptr) return absl::OkStatus();
  if (stream_ == nullptr) return event_->WaitUntil(deadline, what);
  absl::StatusOr<bool> idle = PollUntil([this] { return stream_->Idle(); }, deadline);
  if (!idle.ok()) return idle.status();
  if (*idle) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "device: ", what, " did not complete by its deadline (its stream did not go idle)"));
}

std::unique_ptr<Event> QueuedWork::Release() {
  stream_ = nullptr;
  return std::move(event_);
}

}  // namespace rdmaflow::device
