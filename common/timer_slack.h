// File: timer_slack.h
// -----------------------------------------------------------------------------
// ScopedTimerSlack: narrows the calling thread's timer slack for a scope.
//
// Linux ends a normal thread's timed sleep (nanosleep, and the timeouts of
// poll and epoll_wait) up to its timer slack late: 50 us by default
// (/proc/self/timerslack_ns). A "2 us" sleep lasts about 60 us. That is
// kept on purpose where ranks outnumber cores (the longer sleep leaves the
// core to the peer with work: docs/collectives.md, "Sharing the cores"),
// and it is pure delay where the thing waited for is a device, which needs
// no core of ours: there every nap of a polling wait ends ~50 us after the
// device did. Such waits narrow the slack for their duration.
//
//   {
//     ScopedTimerSlack precise(absl::Microseconds(1));
//     ... sleep-and-poll until the device's event completes ...
//   }  // the thread's slack is what it was before
//
// The slack is per thread (prctl(PR_SET_TIMERSLACK)); setting it cannot
// fail for a valid value, and on a kernel that refuses it the scope simply
// keeps the old slack (applied() says which). Not movable or copyable;
// create and destroy on one thread.
#ifndef RDMAFLOW_COMMON_TIMER_SLACK_H_
#define RDMAFLOW_COMMON_TIMER_SLACK_H_

#include "absl/time/time.h"

namespace rdmaflow {

class ScopedTimerSlack {
 public:
  explicit ScopedTimerSlack(absl::Duration slack);
  ~ScopedTimerSlack();
  ScopedTimerSlack(const ScopedTimerSlack&) = delete;
  ScopedTimerSlack& operator=(const ScopedTimerSlack&) = delete;

  // Whether the slack was changed (and is restored at the scope's end).
  bool applied() const { return previous_ns_ > 0; }

  // The calling thread's timer slack now; 0 where the kernel does not say.
  static absl::Duration Current();

 private:
  long previous_ns_ = 0;  // 0: nothing to restore
};

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_TIMER_SLACK_H_
