// File: blocking.h
// -----------------------------------------------------------------------------
// Blocking conveniences over the non-blocking Endpoint/Transport interface:
// each drives Transport::Progress() on the calling thread until an operation
// finishes or a deadline passes; for set-up code, tools and tests. A layer
// that owns a transport's progress (onesided::ProgressLoop) waits its own
// way (onesided/progress/waits.h) on the same core, PostAndWait(): it hands
// in how it progresses and how it fences, so this layer never calls up.
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
#include <string>

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

// How long a helper that gave up keeps progressing after Close() for the
// operation's completion. Close() fails pending operations from the next
// Progress() calls (loopback: the next one; UCX: once the forced close has
// run), so this only runs out on a backend that broke that contract or a
// transport whose Progress() fails.
inline constexpr absl::Duration kCancelGrace = absl::Seconds(1);

// Drives progress until `done()` (kDeadlineExceeded naming `what` at
// `deadline`; a progress failure with its own code). It must not call
// `done()` again once it returned true: PostAndWait's first `done()` posts.
using ProgressFn = absl::FunctionRef<absl::Status(
    absl::FunctionRef<bool()> done, absl::Time deadline, absl::string_view what)>;
// After a failed wait with the operation posted: ends the operation
// (closes its endpoint, or has whoever shares it fence it) and drives
// completions until `finished()` or for kCancelGrace at most. Returns what
// it did, for the error ("closed the endpoint to rank 3", with what failed
// on the way); the caller checks finished().
using FenceFn = absl::FunctionRef<std::string(absl::FunctionRef<bool()> finished)>;

// The core of every blocking helper: posts with `post` (retrying while it
// reports kResourceExhausted), waits by `progress` until its completion
// fired, and returns the completion's status. kDeadlineExceeded at
// `deadline`: before posting nothing was posted; after posting (or on a
// progress failure) `fence` ended the operation first, and the message says
// whether it ended (see the file comment). `rank` names this rank.
absl::Status PostAndWait(Endpoint& endpoint, int rank,
                         absl::FunctionRef<absl::Status(Completion)> post,
                         absl::Time deadline, absl::string_view what, ProgressFn progress,
                         FenceFn fence);

// The default fence: closes `endpoint` (cancelling what is posted on it),
// then drains completions with `drain(finished, deadline)` for up to
// kCancelGrace. Returns what it did, as a FenceFn does.
std::string CloseAndDrain(
    Endpoint& endpoint, absl::FunctionRef<bool()> finished,
    absl::FunctionRef<absl::Status(absl::FunctionRef<bool()>, absl::Time)> drain);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BLOCKING_H_
