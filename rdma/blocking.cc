#include "rdma/blocking.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::rdma {
namespace {

// Retries `post` while it reports back-pressure, then waits for `done`.
template <typename PostFn>
absl::Status PostAndWait(Transport& transport, PostFn post, absl::Time deadline,
                         absl::string_view what) {
  // Shared with the callback: if the deadline passes first, the callback
  // still fires later (exactly once) and must not touch this stack frame.
  struct State {
    bool finished = false;
    absl::Status result;
  };
  auto state = std::make_shared<State>();
  absl::Status posted;
  RETURN_IF_ERROR(ProgressUntil(
      transport,
      [&] {
        posted = post(Completion([state](absl::Status status) {
          state->result = std::move(status);
          state->finished = true;
        }));
        return !absl::IsResourceExhausted(posted);
      },
      deadline, what));
  RETURN_IF_ERROR(posted);
  RETURN_IF_ERROR(ProgressUntil(
      transport, [&] { return state->finished; }, deadline, what));
  return state->result;
}

}  // namespace

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
  return PostAndWait(
      transport,
      [&](Completion done) {
        return endpoint.PostWrite(src, dst, notification, std::move(done));
      },
      deadline, absl::StrCat("a write to rank ", endpoint.peer_rank()));
}

absl::Status Read(Transport& transport, Endpoint& endpoint,
                  const LocalSlice& dst, const RemoteSlice& src,
                  absl::Time deadline) {
  return PostAndWait(
      transport,
      [&](Completion done) {
        return endpoint.PostRead(dst, src, std::move(done));
      },
      deadline, absl::StrCat("a read from rank ", endpoint.peer_rank()));
}

absl::Status Flush(Transport& transport, Endpoint& endpoint,
                   absl::Time deadline) {
  return PostAndWait(
      transport,
      [&](Completion done) { return endpoint.PostFlush(std::move(done)); },
      deadline, absl::StrCat("a flush to rank ", endpoint.peer_rank()));
}

}  // namespace rdmaflow::rdma
