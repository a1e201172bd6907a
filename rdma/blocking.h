// File: blocking.h
// -----------------------------------------------------------------------------
// Blocking conveniences over the non-blocking Endpoint/Transport interface:
// each drives Transport::Progress() on the calling thread until an operation
// finishes or a deadline passes. For set-up code, tools and tests; the runtime
// drives progress itself.
#ifndef RDMAFLOW_RDMA_BLOCKING_H_
#define RDMAFLOW_RDMA_BLOCKING_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/endpoint.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma {

// Calls transport.Progress() until `done()` returns true.
// kDeadlineExceeded ("timed out after ... waiting for <what>") at `deadline`;
// a Progress() error is returned as is.
absl::Status ProgressUntil(Transport& transport, absl::FunctionRef<bool()> done,
                           absl::Time deadline, absl::string_view what);

// Waits for the next notification.
absl::StatusOr<Notification> WaitNotification(Transport& transport,
                                              absl::Time deadline);

// Posts a write (retrying while the endpoint reports kResourceExhausted) and
// waits for its completion; returns the completion's status.
absl::Status Write(Transport& transport, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline);

// Posts a read and waits for its completion.
absl::Status Read(Transport& transport, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline);

// Posts a flush and waits for it.
absl::Status Flush(Transport& transport, Endpoint& endpoint,
                   absl::Time deadline);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BLOCKING_H_
