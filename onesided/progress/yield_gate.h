// File: yield_gate.h
// -----------------------------------------------------------------------------
// YieldGate: whether a waiting thread whose peers share its cores should
// yield its core or sleep, learned from what its own yields cost.
//
// Where ranks outnumber cores, a rank that sleeps until a peer wakes it
// pays the wake-up (tens of microseconds on a VM) at every exchange; one
// that yields hands the core to the peer it waits for and is back within a
// context switch or two: 4 ranks on 2 cores all-reduce 4 KiB in 8-10 us
// yielding against about 50 us sleeping. But beside threads that are always
// runnable (a training step's compute), Linux's CFS gives a yielded core to
// one of them for a whole time slice (milliseconds): the same all-reduce
// then took 3.2-3.5 ms (docs/collectives.md, "Sharing the cores").
//
// So a waiter yields while its yields come back quickly, and sleeps for
// the next `first_backoff` waits after one that took longer than `slow`,
// twice as many after each further slow one (up to `max_backoff`). Under
// a load some yields still come back quickly (to a peer rank rather than
// to the load), so a quick one does not reopen the gate for good: only
// `quick_to_halve` quick yields in a row halve the backoff. Under a steady
// load that costs about one slow yield every `max_backoff` waits.
//
//   YieldGate gate;
//   if (gate.Open(wait)) { auto t = Now(); sched_yield(); gate.Yielded(wait, Now() - t); }
//   else SleepOnTheBell();
#ifndef RDMAFLOW_ONESIDED_PROGRESS_YIELD_GATE_H_
#define RDMAFLOW_ONESIDED_PROGRESS_YIELD_GATE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace rdmaflow::onesided {

struct YieldGateOptions {
  // A yield that took longer gave the core to other work.
  absl::Duration slow = absl::Microseconds(200);
  // Waits that sleep after the first slow yield, and at most.
  int64_t first_backoff = 16;
  int64_t max_backoff = 1024;
  // Quick yields in a row that halve the backoff (below first_backoff: 0).
  int64_t quick_to_halve = 64;
};

// Single-thread: one per waiting thread.
class YieldGate {
 public:
  YieldGate() = default;
  explicit YieldGate(const YieldGateOptions& options) : options_(options) {}

  // Whether wait number `wait` (counted by the caller, rising) may yield.
  bool Open(uint64_t wait) const { return wait >= closed_until_; }
  // After a yield in wait number `wait` that took `took`.
  void Yielded(uint64_t wait, absl::Duration took);

  int64_t yields() const { return yields_; }
  int64_t slow_yields() const { return slow_yields_; }

 private:
  YieldGateOptions options_;
  uint64_t closed_until_ = 0;
  int64_t backoff_ = 0;  // waits closed after the next slow yield / 2
  int64_t quick_in_a_row_ = 0;
  int64_t yields_ = 0;
  int64_t slow_yields_ = 0;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_PROGRESS_YIELD_GATE_H_
