// File: event_pool.h
// -----------------------------------------------------------------------------
// EventPool: a runtime's events, reused. Take() hands out a free one (or a
// new one); Give() takes one back, and drops a null one (QueuedWork::
// Release() gives null for an event the device never took a Record of,
// which may be bad and is not pooled).
//
//   device::EventPool events(runtime);
//   ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event, events.Take());
//   ...
//   events.Give(work.Release());
//
// Thread-compatible. The pool's events go with it, before the runtime.
#ifndef RDMAFLOW_DEVICE_EVENT_POOL_H_
#define RDMAFLOW_DEVICE_EVENT_POOL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

class EventPool {
 public:
  // `runtime` must outlive the pool.
  explicit EventPool(DeviceRuntime& runtime) : runtime_(&runtime) {}

  // A free event, or a new one (the runtime's error where it makes none).
  absl::StatusOr<std::unique_ptr<Event>> Take();
  // Back for reuse; a null one is dropped.
  void Give(std::unique_ptr<Event> event);
  size_t free() const { return free_.size(); }

 private:
  DeviceRuntime* runtime_;
  std::vector<std::unique_ptr<Event>> free_;
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_EVENT_POOL_H_
