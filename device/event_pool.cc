#include "device/event_pool.h"

#include <utility>

namespace rdmaflow::device {

absl::StatusOr<std::unique_ptr<Event>> EventPool::Take() {
  if (free_.empty()) return runtime_->CreateEvent();
  std::unique_ptr<Event> event = std::move(free_.back());
  free_.pop_back();
  return event;
}

void EventPool::Give(std::unique_ptr<Event> event) {
  if (event != nullptr) free_.push_back(std::move(event));
}

}  // namespace rdmaflow::device
