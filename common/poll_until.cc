// File: poll_until.cc
#include "common/poll_until.h"

#include <algorithm>
#include <optional>

#include "absl/time/clock.h"
#include "common/timer_slack.h"

namespace rdmaflow {

absl::StatusOr<bool> PollUntil(absl::FunctionRef<absl::StatusOr<bool>()> reached,
                               absl::Time deadline, const PollOptions& options) {
  std::optional<ScopedTimerSlack> precise;
  absl::Duration nap = options.first_nap;
  for (int poll = 0;; ++poll) {
    absl::StatusOr<bool> done = reached();
    if (!done.ok() || *done) return done;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    if (poll < options.eager_polls) continue;
    // Narrowed at the first nap only: a wait that ends while polling
    // eagerly makes no system call.
    if (!precise.has_value() && options.slack != absl::InfiniteDuration()) {
      precise.emplace(options.slack);
    }
    absl::SleepFor(std::min(nap, deadline - now));
    nap = std::min(nap * 2, options.max_nap);
  }
}

}  // namespace rdmaflow
