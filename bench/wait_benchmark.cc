// wait_benchmark: how late a deadline-bounded poll notices what it waits
// for (common/poll_until.h), Google Benchmark. The condition turns true at
// a known time (the clock passing it: the stand-in for a device event
// completing), so what is measured is the wait's own lateness and what the
// polling costs, not a device's:
//
//   BM_Wait/<us>/<policy>   waits <us> microseconds for the condition;
//     counters: late_us (from the condition turning true to the wait
//     returning, mean) and polls (probes a wait made, mean); CPU time is
//     the polling's cost on this thread.
//
// Policies, side by side in one run:
//   0  event_before: Event::WaitUntil before this change (no eager polls,
//      naps of 2 us doubling to 200 us, the thread's own timer slack);
//   1  poll_before: collectives::PollUntil before it (32 eager polls, naps
//      to 50 us, the thread's slack);
//   2  now: PollUntil's defaults (32 eager polls, naps to 20 us, 1 us
//      slack), what both waits use today;
//   3  precise_50: the same with naps to 50 us (the longer nap's
//      lateness, without the slack's).
//
//   bazel run -c opt //bench:wait_benchmark -- --benchmark_repetitions=3
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "common/poll_until.h"

namespace rdmaflow {
namespace {

PollOptions Policy(int64_t index) {
  PollOptions options;
  switch (index) {
    case 0:
      options.eager_polls = 0;
      options.max_nap = absl::Microseconds(200);
      options.slack = absl::InfiniteDuration();
      break;
    case 1:
      options.max_nap = absl::Microseconds(50);
      options.slack = absl::InfiniteDuration();
      break;
    case 3:
      options.max_nap = absl::Microseconds(50);
      break;
    default:
      break;
  }
  return options;
}

const char* PolicyName(int64_t index) {
  switch (index) {
    case 0:
      return "event_before";
    case 1:
      return "poll_before";
    case 3:
      return "precise_50";
    default:
      return "now";
  }
}

void BM_Wait(benchmark::State& state) {
  const absl::Duration wait = absl::Microseconds(state.range(0));
  const PollOptions options = Policy(state.range(1));
  state.SetLabel(PolicyName(state.range(1)));
  double late_us = 0;
  double polls = 0;
  for (auto _ : state) {
    const absl::Time ready = absl::Now() + wait;
    int64_t probes = 0;
    absl::StatusOr<bool> reached = PollUntil(
        [&]() -> absl::StatusOr<bool> {
          ++probes;
          return absl::Now() >= ready;
        },
        ready + absl::Seconds(10), options);
    const absl::Time returned = absl::Now();
    if (!reached.ok() || !*reached) {
      state.SkipWithError("the wait did not see its condition");
      break;
    }
    late_us += absl::ToDoubleMicroseconds(returned - ready);
    polls += static_cast<double>(probes);
  }
  state.counters["late_us"] = benchmark::Counter(late_us, benchmark::Counter::kAvgIterations);
  state.counters["polls"] = benchmark::Counter(polls, benchmark::Counter::kAvgIterations);
}

BENCHMARK(BM_Wait)
    ->ArgsProduct({{10, 100, 1000, 5000}, {0, 1, 2, 3}})
    ->ArgNames({"us", "policy"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rdmaflow
