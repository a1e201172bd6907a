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

// How long a helper that gave up keeps progressing after Close() for the
// operation's completion. Close() fails pending operations from the next
// Progress() calls (loopback: the next one; UCX: once the forced close has
// run), so this only runs out on a backend that broke that contract or a
// transport whose Progress() fails.
constexpr absl::Duration kCancelGrace = absl::Seconds(1);

// Shared by a helper and its operation's callback: if the helper returns
// first (it could not see the cancellation through), the callback still
// fires later, exactly once, and touches only this heap object, never the
// helper's stack frame.
struct OperationState {
  bool finished = false;
  absl::Status result;
};

// The helper waited for `what` on `endpoint` and `why` (its deadline, or a
// Progress() error) ended the wait with the operation still in flight.
// Fences it before anyone may reuse its memory: closes the endpoint, then
// progresses until the operation's completion has fired (bounded by
// kCancelGrace). Returns `why`'s code with what was done.
absl::Status GiveUp(ProgressDriver& driver, Endpoint& endpoint,
                    const OperationState& state, const absl::Status& why,
                    absl::string_view what) {
  const int peer = endpoint.peer_rank();
  absl::Status closed = endpoint.Close();
  absl::Status progress = driver.Drain([&] { return state.finished; },
                                       absl::Now() + kCancelGrace);
  if (state.finished) {
    return absl::Status(
        why.code(),
        absl::StrCat(why.message(), "; closed the endpoint to rank ", peer,
                     " and ", what, " ended (", state.result.ToString(),
                     "): nothing of it lands later, and the endpoint is "
                     "unusable from now on (connect again)"));
  }
  std::string trouble;
  if (!closed.ok()) absl::StrAppend(&trouble, "; Close() failed: ", closed.ToString());
  if (!progress.ok()) absl::StrAppend(&trouble, "; Progress() failed: ", progress.ToString());
  std::string message = absl::StrCat(
      why.message(), "; closed the endpoint to rank ", peer, " but ", what,
      " did not end within ", absl::FormatDuration(kCancelGrace), " of the close",
      trouble,
      ": it may still write its local memory (a read) or read it (a write); "
      "do not free or reuse that memory while the transport lives");
  std::fprintf(stderr, "rdma/blocking: rank %d: %s\n", driver.transport().rank(),
               message.c_str());
  return absl::Status(why.code(), message);
}

// Retries `post` while it reports back-pressure, then waits for `done`. On
// a timeout after posting, fences the operation (GiveUp) before returning.
template <typename PostFn>
absl::Status PostAndWait(ProgressDriver& driver, Endpoint& endpoint, PostFn post,
                         absl::Time deadline, absl::string_view what) {
  if (absl::Now() >= deadline) {
    // Posting now could only time out with the operation in flight.
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", driver.transport().rank(),
                     ": the deadline passed before posting ", what,
                     "; nothing was posted"));
  }
  auto state = std::make_shared<OperationState>();
  absl::Status posted;
  // A timeout here posted nothing: nothing to fence.
  RETURN_IF_ERROR(driver.WaitFor(
      [&] {
        posted = post(Completion([state](absl::Status status) {
          state->result = std::move(status);
          state->finished = true;
        }));
        return !absl::IsResourceExhausted(posted);
      },
      deadline, what));
  RETURN_IF_ERROR(posted);
  absl::Status waited =
      driver.WaitFor([&] { return state->finished; }, deadline, what);
  if (!waited.ok()) return GiveUp(driver, endpoint, *state, waited, what);
  return state->result;
}

}  // namespace

absl::Status SpinningDriver::WaitFor(absl::FunctionRef<bool()> done, absl::Time deadline,
                                     absl::string_view what) {
  return ProgressUntil(transport_, done, deadline, what);
}

absl::Status SpinningDriver::Drain(absl::FunctionRef<bool()> done, absl::Time deadline) {
  while (!done() && absl::Now() < deadline) {
    absl::StatusOr<int> fired = transport_.Progress();
    if (!fired.ok()) return fired.status();
    if (*fired == 0) std::this_thread::yield();
  }
  return absl::OkStatus();
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

absl::Status Write(ProgressDriver& driver, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline) {
  return PostAndWait(
      driver, endpoint,
      [&](Completion done) {
        return endpoint.PostWrite(src, dst, notification, std::move(done));
      },
      deadline, absl::StrCat("a write to rank ", endpoint.peer_rank()));
}

absl::Status Read(ProgressDriver& driver, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline) {
  return PostAndWait(
      driver, endpoint,
      [&](Completion done) {
        return endpoint.PostRead(dst, src, std::move(done));
      },
      deadline, absl::StrCat("a read from rank ", endpoint.peer_rank()));
}

absl::Status Flush(ProgressDriver& driver, Endpoint& endpoint,
                   absl::Time deadline) {
  return PostAndWait(
      driver, endpoint,
      [&](Completion done) { return endpoint.PostFlush(std::move(done)); },
      deadline, absl::StrCat("a flush to rank ", endpoint.peer_rank()));
}

absl::Status Write(Transport& transport, Endpoint& endpoint,
                   const LocalSlice& src, const RemoteSlice& dst,
                   std::optional<uint32_t> notification, absl::Time deadline) {
  SpinningDriver driver(transport);
  return Write(driver, endpoint, src, dst, notification, deadline);
}

absl::Status Read(Transport& transport, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline) {
  SpinningDriver driver(transport);
  return Read(driver, endpoint, dst, src, deadline);
}

absl::Status Flush(Transport& transport, Endpoint& endpoint,
                   absl::Time deadline) {
  SpinningDriver driver(transport);
  return Flush(driver, endpoint, deadline);
}

}  // namespace rdmaflow::rdma
