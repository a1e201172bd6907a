// File: poll_until.h
// -----------------------------------------------------------------------------
// PollUntil: a deadline-bounded wait for something a device (not a peer on
// our cores) will make true: an event's completion, a stream's mark.
//
// It polls back to back a few times (a device's short operations end
// within microseconds), then naps, 2 us doubling to 20 us, with the
// thread's timer slack narrowed to 1 us (common/timer_slack.h) so that a
// nap lasts about what it says rather than 50 us more: what is waited for
// runs on the device and needs none of our cores. The slack is restored
// before it returns.
//
//   absl::StatusOr<bool> reached = PollUntil([&] { return event.Done(); }, deadline);
//   if (!reached.ok()) return reached.status();       // the device's error
//   if (!*reached) return DeadlineExceeded("...");    // the caller names it
//
// Waits for a peer rank's answer use onesided::WaitPolicy instead, whose
// sleeps keep the default slack where ranks outnumber cores.
#ifndef RDMAFLOW_COMMON_POLL_UNTIL_H_
#define RDMAFLOW_COMMON_POLL_UNTIL_H_

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rdmaflow {

struct PollOptions {
  // Polls back to back before the first nap (which follows one more).
  int eager_polls = 32;
  // Naps double from the first to the longest.
  absl::Duration first_nap = absl::Microseconds(2);
  absl::Duration max_nap = absl::Microseconds(20);
  // The timer slack while napping; absl::InfiniteDuration() leaves the
  // thread's own (the kernel's 50 us by default).
  absl::Duration slack = absl::Microseconds(1);
};

// True once `reached` returns true; false once `deadline` passes first (the
// caller says what did not finish); `reached`'s own error.
absl::StatusOr<bool> PollUntil(absl::FunctionRef<absl::StatusOr<bool>()> reached,
                               absl::Time deadline, const PollOptions& options = {});

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_POLL_UNTIL_H_
