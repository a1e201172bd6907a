// File: progress_driver.h
// -----------------------------------------------------------------------------
// ProgressDriver: whoever drives a transport's progress, as the helpers of
// this layer that must wait see it (rdma/blocking.h's Write/Read/Flush,
// Barrier in rdma/rendezvous.h). The one-sided layer's ProgressLoop is one,
// so a helper's wait keeps running the loop's other protocols and follows
// its wait policy; blocking.cc has a driver that just spins Progress().
#ifndef RDMAFLOW_RDMA_PROGRESS_DRIVER_H_
#define RDMAFLOW_RDMA_PROGRESS_DRIVER_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma {

// How a helper drives a transport's progress. Single-thread, as its owner.
class ProgressDriver {
 public:
  virtual ~ProgressDriver() = default;

  virtual Transport& transport() = 0;
  // Progresses until `done()`. kDeadlineExceeded naming `what` at
  // `deadline`; a progress failure with its own code.
  virtual absl::Status WaitFor(absl::FunctionRef<bool()> done,
                               absl::Time deadline, absl::string_view what) = 0;
  // The fence after giving up: progresses completions until `done()` or
  // `deadline`, whatever failed before (a failure recorded by the driver
  // does not stop it). Returns the first Progress() error, or OK; the
  // caller checks `done()` itself.
  virtual absl::Status Drain(absl::FunctionRef<bool()> done,
                             absl::Time deadline) = 0;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_PROGRESS_DRIVER_H_
