#include "rdma/blocking.h"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::rdma {
namespace {

// Shared by a helper and its operation's callback: if the helper returns
// first (it could not see the cancellation through), the callback still
// fires later, exactly once, and touches only this heap object, never the
// helper's stack frame.
struct OperationState {
  bool finished = false;
  absl::Status result;
};

// The helper waited for `what` on `endpoint` and `why` (its deadline, or a
// progress error) ended the wait with the operation still in flight: `fence`
// ends it before anyone may reuse its memory. Returns `why`'s code with what
// was done.
absl::Status GiveUp(Endpoint& endpoint, int rank, const OperationState& state,
                    const absl::Status& why, absl::string_view what, FenceFn fence) {
  const std::string done = fence([&] { return state.finished; });
  if (state.finished) {
    return absl::Status(
        why.code(),
        absl::StrCat(why.message(), "; ", done, ", and ", what, " ended (",
                     state.result.ToString(), "): nothing of it lands later"));
  }
  std::string message = absl::StrCat(
      why.message(), "; ", done, " but ", what, " did not end within ",
      absl::FormatDuration(kCancelGrace),
      ": it may still write its local memory (a read) or read it (a write); "
      "do not free or reuse that memory while the transport lives");
  std::fprintf(stderr, "rdma/blocking: rank %d: %s\n", rank, message.c_str());
  return absl::Status(why.code(), message);
}

// Spins `transport`'s Progress(), yielding between empty rounds, until
// `done()` or `deadline`.
absl::Status DrainSpinning(Transport& transport, absl::FunctionRef<bool()> done,
                           absl::Time deadline) {
  while (!done() && absl::Now() < deadline) {
    absl::StatusOr<int> fired = transport.Progress();
    if (!fired.ok()) return fired.status();
    if (*fired == 0) std::this_thread::yield();
  }
  return absl::OkStatus();
}

// PostAndWait() spinning `transport`, fenced by CloseAndDrain().
absl::Status Spinning(Transport& transport, Endpoint& endpoint,
                      absl::FunctionRef<absl::Status(Completion)> post, absl::Time deadline,
                      absl::string_view what) {
  return PostAndWait(
      endpoint, transport.rank(), post, deadline, what,
      [&](absl::FunctionRef<bool()> done, absl::Time until, absl::string_view waiting) {
        return ProgressUntil(transport, done, until, waiting);
      },
      [&](absl::FunctionRef<bool()> finished) {
        return CloseAndDrain(endpoint, finished,
                             [&](absl::FunctionRef<bool()> done, absl::Time until) {
                               return DrainSpinning(transport, done, until);
                             });
      });
}

}  // namespace

absl::Status PostAndWait(Endpoint& endpoint, int rank,
                         absl::FunctionRef<absl::Status(Completion)> post,
                         absl::Time deadline, absl::string_view what, ProgressFn progress,
                         FenceFn fence) {
  if (absl::Now() >= deadline) {
    // Posting now could only time out with the operation in flight.
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank, ": the deadline passed before posting ", what, "; nothing was posted"));
  }
  auto state = std::make_shared<OperationState>();
  absl::Status posted;
  // A timeout here posted nothing: nothing to fence.
  RETURN_IF_ERROR(progress(
      [&] {
        posted = post(Completion([state](absl::Status status) {
          state->result = std::move(status);
          state->finished = true;
        }));
        return !absl::IsResourceExhausted(posted);
      },
      deadline, what));
  RETURN_IF_ERROR(posted);
  absl::Status waited = progress([&] { return state->finished; }, deadline, what);
  if (!waited.ok()) return GiveUp(endpoint, rank, *state, waited, what, fence);
  return state->result;
}

std::string CloseAndDrain(
    Endpoint& endpoint, absl::FunctionRef<bool()> finished,
    absl::FunctionRef<absl::Status(absl::FunctionRef<bool()>, absl::Time)> drain) {
  absl::Status closed = endpoint.Close();
  absl::Status drained = drain(finished, absl::Now() + kCancelGrace);
  std::string done = absl::StrCat("closed the endpoint to rank ", endpoint.peer_rank(),
                                  " (unusable from now on: connect again)");
  if (!closed.ok()) absl::StrAppend(&done, " (Close() failed: ", closed.ToString(), ")");
  if (!drained.ok()) absl::StrAppend(&done, " (progress failed: ", drained.ToString(), ")");
  return done;
}

absl::Status ProgressUntil(Transport& transport, absl::FunctionRef<bool()> done,
                           absl::Time deadline, absl::string_view what) {
  const absl::Time start = absl::Now();
  while (!done()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", transport.rank(), " timed out after ",
                       absl::FormatDuration(absl::Now() - start),
                       " waiting for ", what));
    }
    RETURN_IF_ERROR(transport.Progress().status());
  }
  return absl::OkStatus();
}

absl::StatusOr<Notification> WaitNotification(Transport& transport,
                                              absl::Time deadline) {
  std::optional<Notification> notification;
  RETURN_IF_ERROR(ProgressUntil(
      transport,
      [&] {
        notification = transport.PollNotification();
        return notification.has_value();
      },
      deadline, "a notification"));
  return *notification;
}

absl::Status Write(Transport& transport, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline) {
  return Spinning(
      transport, endpoint,
      [&](Completion done) {
        return endpoint.PostWrite(src, dst, notification, std::move(done));
      },
      deadline, absl::StrCat("a write to rank ", endpoint.peer_rank()));
}

absl::Status Read(Transport& transport, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline) {
  return Spinning(
      transport, endpoint,
      [&](Completion done) { return endpoint.PostRead(dst, src, std::move(done)); },
      deadline, absl::StrCat("a read from rank ", endpoint.peer_rank()));
}

absl::Status Flush(Transport& transport, Endpoint& endpoint,
                   absl::Time deadline) {
  return Spinning(
      transport, endpoint,
      [&](Completion done) { return endpoint.PostFlush(std::move(done)); },
      deadline, absl::StrCat("a flush to rank ", endpoint.peer_rank()));
}

}  // namespace rdmaflow::rdma
