// File: blocking.h
// -----------------------------------------------------------------------------
// Blocking conveniences over the non-blocking Endpoint/Transport interface:
// each drives Transport::Progress() on the calling thread until an operation
// finishes or a deadline passes. The Transport& overloads spin Progress()
// on the calling thread: for set-up code, tools and tests. A layer that owns
// a transport's progress (onesided::ProgressLoop) is a ProgressDriver and
// passes itself to the ProgressDriver& overloads, so that its handlers keep
// running and its wait policy applies while a helper waits.
//
// Giving up is a protocol step: Write(), Read() and Flush() never return
// while their operation may still move bytes, unless they say so. When the
// deadline passes (or Progress() fails) with the operation posted, they
// CLOSE THE ENDPOINT, which fails its pending operations with kCancelled,
// and keep progressing until the operation's completion has fired (at most
// one more second); only then do they return, with the wait's code
// (kDeadlineExceeded naming the peer and the operation). From then on the
// endpoint is unusable (posts return kFailedPrecondition): connect again.
// If even the cancellation does not complete in that second (a backend
// breaking Close()'s contract), the message says that the memory may still
// be written or read, and the helper logs it: keep that memory alive while
// the transport lives. Either way the completion callback owns only heap
// state, so a late completion never touches the returned call's stack.
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
#include "rdma/progress_driver.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma {

// The driver of the Transport& overloads, for set-up code, tools and tests:
// spins `transport`'s Progress() on the calling thread (its Drain() yields
// between empty rounds).
class SpinningDriver final : public ProgressDriver {
 public:
  explicit SpinningDriver(Transport& transport) : transport_(transport) {}
  Transport& transport() override { return transport_; }
  absl::Status WaitFor(absl::FunctionRef<bool()> done, absl::Time deadline,
                       absl::string_view what) override;
  absl::Status Drain(absl::FunctionRef<bool()> done,
                     absl::Time deadline) override;

 private:
  Transport& transport_;
};

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
// kDeadlineExceeded at `deadline`: before posting (the deadline had passed,
// or the queue stayed full) nothing was posted and the endpoint stays open;
// after posting, the endpoint was closed and the write fenced (see above).
// A Progress() error after posting also closes and fences.
absl::Status Write(Transport& transport, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline);

// Posts a read and waits for its completion. Timeouts as for Write(): once
// it returns, nothing more lands in `dst` (unless the message says the
// cancellation did not complete).
absl::Status Read(Transport& transport, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline);

// Posts a flush and waits for it. Timeouts as for Write().
absl::Status Flush(Transport& transport, Endpoint& endpoint,
                   absl::Time deadline);

// The same three, progressed by `driver` (whose transport owns `endpoint`).
absl::Status Write(ProgressDriver& driver, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline);
absl::Status Read(ProgressDriver& driver, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline);
absl::Status Flush(ProgressDriver& driver, Endpoint& endpoint,
                   absl::Time deadline);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BLOCKING_H_
