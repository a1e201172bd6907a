// File: line_probe.cc
#include "bench/line_probe.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rdmaflow::bench {
namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};

// What the two threads share: the ball, the start, and the way out.
struct Court {
  Line ball;
  alignas(64) std::atomic<int> pinned{0};
  std::atomic<bool> give_up{false};
  absl::Time deadline;
};

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Spins until the ball holds `want`; false when the probe gives up (the
// deadline, looked at every 4096 spins, or the other side gave up).
bool WaitFor(Court& court, uint64_t want) {
  for (uint32_t spins = 1;; ++spins) {
    if (court.ball.value.load(std::memory_order_acquire) == want) return true;
    if (spins % 4096 == 0 &&
        (court.give_up.load(std::memory_order_relaxed) || absl::Now() > court.deadline)) {
      court.give_up.store(true, std::memory_order_relaxed);
      return false;
    }
  }
}

}  // namespace

absl::StatusOr<LineRoundTrip> ProbeLineRoundTrip(const LineProbeOptions& options) {
  if (options.batches < 1 || options.round_trips < 1 || options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the line probe needs at least one batch of at least one round trip and a timeout");
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  LineRoundTrip result;
  result.cpu_a = options.cpu_a >= 0 ? options.cpu_a : -1;
  result.cpu_b = options.cpu_b >= 0 ? options.cpu_b : -1;
  for (int* cpu : {&result.cpu_a, &result.cpu_b}) {
    if (*cpu >= 0) {
      if (*cpu >= CPU_SETSIZE || !CPU_ISSET(*cpu, &allowed)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CPU ", *cpu, " is not one this process may run on (", cpus.size(), " allowed)"));
      }
      continue;
    }
    for (int candidate : cpus) {
      if (candidate != result.cpu_a && candidate != result.cpu_b) {
        *cpu = candidate;
        break;
      }
    }
  }
  if (result.cpu_a < 0 || result.cpu_b < 0 || result.cpu_a == result.cpu_b) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the line probe needs two CPUs; this process may run on ", cpus.size()));
  }
  Court court;
  court.deadline = absl::Now() + options.timeout;
  const uint64_t per_batch = static_cast<uint64_t>(options.round_trips);
  const uint64_t total = per_batch * static_cast<uint64_t>(options.batches);
  std::vector<double> batch_ns;
  bool pinned_a = false, pinned_b = false;
  // B answers each odd value with the next even one.
  std::thread b([&] {
    pinned_b = Pin(result.cpu_b);
    court.pinned.fetch_add(1, std::memory_order_acq_rel);
    if (!pinned_b) return;
    for (uint64_t i = 0; i < total; ++i) {
      if (!WaitFor(court, 2 * i + 1)) return;
      court.ball.value.store(2 * i + 2, std::memory_order_release);
    }
  });
  std::thread a([&] {
    pinned_a = Pin(result.cpu_a);
    court.pinned.fetch_add(1, std::memory_order_acq_rel);
    // Both threads on their CPUs before the first serve.
    while (court.pinned.load(std::memory_order_acquire) < 2) {
      if (absl::Now() > court.deadline) {
        court.give_up.store(true, std::memory_order_relaxed);
        return;
      }
    }
    if (!pinned_a || !pinned_b) {
      court.give_up.store(true, std::memory_order_relaxed);
      return;
    }
    for (uint64_t i = 0; i < total;) {
      const absl::Time begin = absl::Now();
      for (uint64_t end = i + per_batch; i < end; ++i) {
        court.ball.value.store(2 * i + 1, std::memory_order_release);
        if (!WaitFor(court, 2 * i + 2)) return;
      }
      batch_ns.push_back(absl::ToDoubleNanoseconds(absl::Now() - begin) /
                         static_cast<double>(per_batch));
    }
  });
  a.join();
  b.join();
  if (!pinned_a || !pinned_b) {
    return absl::InternalError(absl::StrCat("cannot pin a thread to CPU ",
                                            pinned_a ? result.cpu_b : result.cpu_a));
  }
  if (static_cast<int>(batch_ns.size()) < options.batches) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the line probe between CPUs ", result.cpu_a, " and ", result.cpu_b, " did not finish ",
        options.batches, " batches of ", options.round_trips, " round trips in ",
        absl::FormatDuration(options.timeout), ": is one of the CPUs busy?"));
  }
  std::nth_element(batch_ns.begin(), batch_ns.begin() + batch_ns.size() / 2, batch_ns.end());
  result.round_trip_ns = batch_ns[batch_ns.size() / 2];
  return result;
}

}  // namespace rdmaflow::bench
