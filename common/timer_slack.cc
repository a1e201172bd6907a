// File: timer_slack.cc
#include "common/timer_slack.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstdint>

namespace rdmaflow {

ScopedTimerSlack::ScopedTimerSlack(absl::Duration slack) {
  const int previous = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  // PR_SET_TIMERSLACK takes nanoseconds, at least 1 (0 means "the
  // default" there, not "none").
  const int64_t ns = std::max<int64_t>(1, absl::ToInt64Nanoseconds(slack));
  if (previous <= 0 || previous == ns) return;
  if (prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(ns), 0, 0, 0) == 0) {
    previous_ns_ = previous;
  }
}

ScopedTimerSlack::~ScopedTimerSlack() {
  if (previous_ns_ > 0) {
    prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(previous_ns_), 0, 0, 0);
  }
}

absl::Duration ScopedTimerSlack::Current() {
  const int ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  return ns > 0 ? absl::Nanoseconds(ns) : absl::ZeroDuration();
}

}  // namespace rdmaflow
