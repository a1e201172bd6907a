// File: wait_policy.h
// -----------------------------------------------------------------------------
// How a rank waits for a peer: spin, then (optionally) yield, then sleep
// with a bounded wake-up latency. A wait that only spins is the fastest
// while the rank has a core to itself, and the slowest way to wait when
// ranks outnumber cores: the spinner holds the core the peer it waits for
// needs. An idle wait escalates:
//
//   spin   the first `spin_rounds` idle rounds poll back to back;
//   yield  then, for `yield_for`, each idle round ends in sched_yield();
//   sleep  then each idle round sleeps, starting at `min_sleep` and doubling
//          up to `max_sleep`, plus the kernel's timer slack (50 us for a
//          normal thread): the longest a sleeping wait can take to notice
//          that its peer has answered. The slack is left as it is: with
//          more ranks than cores the longer sleep leaves the core to the
//          peer with work (docs/collectives.md, "Sharing the cores").
//
// The default does not yield. Under Linux's CFS a sched_yield() beside
// threads that are always runnable (the training step's compute) gives them
// the core for a whole time slice: the 4-rank ring on 2 cores with 2 compute
// threads beside it fell to 0.16 GB/s at 1 MiB with 10 us of yielding, and
// kept 1.46 GB/s (over half its idle bandwidth) sleeping at once
// (docs/collectives.md, "Sharing the cores").
//
// Any round that makes progress starts the escalation again from spin.
//
//   WaitPolicy policy = WaitPolicy::Adaptive();
//   IdleBackoff backoff(policy);
//   while (!ready()) {
//     if (PollOnce() > 0) backoff.Reset(); else backoff.Idle();
//   }
//
// Policies also parse from text (`--wait=spin|yield|adaptive`, or
// `adaptive:spin=200,yield_us=50,sleep_us=100,events=1`, and `announced=0`
// to keep such a policy as given over UCX TCP) for CLIs and benchmarks.
#ifndef RDMAFLOW_ONESIDED_PROGRESS_WAIT_POLICY_H_
#define RDMAFLOW_ONESIDED_PROGRESS_WAIT_POLICY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rdmaflow::onesided {

// A value type; copy freely.
struct WaitPolicy {
  // Idle rounds polled back to back before the wait yields or sleeps.
  int64_t spin_rounds = 100;
  // How long idle rounds yield the core before the wait starts sleeping;
  // absl::InfiniteDuration() never sleeps.
  absl::Duration yield_for = absl::ZeroDuration();
  // The first sleep, and the longest: sleeps double from one to the other.
  absl::Duration min_sleep = absl::Microseconds(5);
  absl::Duration max_sleep = absl::Microseconds(20);
  // Sleeps in Transport::WaitForActivity() (a ProgressLoop's waits), which
  // ends early when a completion or notification arrives where the backend
  // has events for them (ibverbs with `events=1`): then a longer max_sleep
  // costs no wake-up latency for those, only for flags in memory.
  bool sleep_on_events = false;
  // Whether ForAnnouncedActivity() may turn this policy into sleeping in
  // the transport's wait from the first idle round where the transport
  // announces all its activity (UCX over TCP alone). `announced=0` in the
  // text keeps the policy as given there: spin, yield and sleep as it says.
  bool follow_announced = true;

  // Never yields nor sleeps: a core per rank, latency benchmarks.
  static WaitPolicy Spin();
  // Spins 200 rounds, then yields for ever: never sleeps.
  static WaitPolicy Yield();
  // Spin, then sleep, with the defaults above (the default everywhere).
  static WaitPolicy Adaptive();

  // The longest sleep of a wait on a transport that announces every
  // activity (ForAnnouncedActivity).
  static constexpr absl::Duration kAnnouncedMaxSleep = absl::Microseconds(200);

  // What this policy becomes on a transport whose WaitForActivity() wakes
  // for everything its Progress() could find (Transport::
  // AnnouncesActivity(): UCX over TCP alone). A policy that sleeps then
  // neither spins nor yields: each idle round sleeps in the transport's
  // wait, which the next arrival or completion ends, for up to
  // max(max_sleep, kAnnouncedMaxSleep) plus the kernel's timer slack, the
  // longest a condition set by another thread goes unseen. Polling such a transport costs a system
  // call a round: with 4 ranks on 2 cores, the ring's waits over TCP made
  // about 160,000 epoll_wait calls a second among the four, ten for each
  // send or receive (docs/collectives.md, "Waiting on TCP's events"). A policy that never sleeps (Spin(),
  // Yield()), or one with follow_announced false, is returned as it is.
  WaitPolicy ForAnnouncedActivity() const;

  // kInvalidArgument naming the field: negative rounds or durations, a
  // sleep of zero or beyond one second, min_sleep above max_sleep.
  absl::Status Validate() const;

  // "spin", "yield", "adaptive" or
  // "adaptive:spin=N,yield_us=N,sleep_us=N,events=0|1,announced=0|1"
  // (sleep_us sets max_sleep; announced=0 clears follow_announced).
  // kInvalidArgument naming what is wrong.
  static absl::StatusOr<WaitPolicy> Parse(absl::string_view text);
  // The text Parse() reads back to the same policy.
  std::string ToString() const;
};

// The escalation of one wait. Single-thread.
class IdleBackoff {
 public:
  enum class Phase { kSpin, kYield, kSleep };

  // The clock and the sleep are the real ones unless a test injects its own.
  struct Clock {
    std::function<absl::Time()> now;
    std::function<void(absl::Duration)> sleep;
    std::function<void()> yield;
  };

  explicit IdleBackoff(const WaitPolicy& policy);
  IdleBackoff(const WaitPolicy& policy, Clock clock);

  // absl::Now(), absl::SleepFor() and std::this_thread::yield().
  static Clock RealClock();

  // After a round that did nothing: spins, yields or sleeps as the phase
  // says; a sleep lasts at most `at_most` (the time a wait has left).
  void Idle(absl::Duration at_most = absl::InfiniteDuration());
  // After a round that made progress: back to spinning.
  void Reset();

  Phase phase() const { return phase_; }
  // Counted since construction, for the waits' counters.
  int64_t yields() const { return yields_; }
  int64_t sleeps() const { return sleeps_; }

 private:
  const WaitPolicy policy_;
  const Clock clock_;
  Phase phase_ = Phase::kSpin;
  int64_t idle_rounds_ = 0;
  absl::Time yield_until_;
  absl::Duration next_sleep_;
  int64_t yields_ = 0;
  int64_t sleeps_ = 0;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_PROGRESS_WAIT_POLICY_H_
