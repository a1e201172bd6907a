// File: line_probe.cc
#include "bench/line_probe.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/peer_copy.h"
#include "common/status_macros.h"

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
  absl::Duration timeout;
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

// The two CPUs of `options` (the first two allowed where unset), checked.
absl::StatusOr<std::pair<int, int>> ChooseCpus(const LineProbeOptions& options) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  int chosen[2] = {options.cpu_a >= 0 ? options.cpu_a : -1,
                   options.cpu_b >= 0 ? options.cpu_b : -1};
  for (int& cpu : chosen) {
    if (cpu >= 0) {
      if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CPU ", cpu, " is not one this process may run on (", cpus.size(), " allowed)"));
      }
      continue;
    }
    for (int candidate : cpus) {
      if (candidate != chosen[0] && candidate != chosen[1]) {
        cpu = candidate;
        break;
      }
    }
  }
  if (options.cpu_a >= 0 && options.cpu_a == options.cpu_b) {
    return absl::InvalidArgumentError(
        absl::StrCat("the line probe needs two different CPUs, not CPU ", options.cpu_a, " twice"));
  }
  if (chosen[0] < 0 || chosen[1] < 0 || chosen[0] == chosen[1]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the line probe needs two CPUs; this process may run on ", cpus.size()));
  }
  return std::make_pair(chosen[0], chosen[1]);
}

// Runs `serve` on a thread pinned to CPU a and `answer` on one pinned to
// CPU b, started together once both are pinned; each returns false when it
// gave up. kInternal when a thread cannot be pinned; kDeadlineExceeded
// naming `what` when either gave up.
absl::Status RunPinnedPair(Court& court, int cpu_a, int cpu_b, const std::string& what,
                           const std::function<bool()>& serve,
                           const std::function<bool()>& answer) {
  std::atomic<bool> pinned_a{false}, pinned_b{false};
  bool served = false, answered = false;
  auto start = [&](int cpu, std::atomic<bool>& pinned) {
    pinned.store(Pin(cpu), std::memory_order_relaxed);
    court.pinned.fetch_add(1, std::memory_order_acq_rel);
    while (court.pinned.load(std::memory_order_acquire) < 2) {
      if (court.give_up.load(std::memory_order_relaxed) || absl::Now() > court.deadline) {
        court.give_up.store(true, std::memory_order_relaxed);
        return false;
      }
    }
    if (!pinned_a.load(std::memory_order_relaxed) || !pinned_b.load(std::memory_order_relaxed)) {
      return false;
    }
    return true;
  };
  std::thread b([&] { answered = start(cpu_b, pinned_b) && answer(); });
  std::thread a([&] { served = start(cpu_a, pinned_a) && serve(); });
  a.join();
  b.join();
  if (!pinned_a.load() || !pinned_b.load()) {
    return absl::InternalError(absl::StrCat(
        "cannot pin a thread to CPU ",
        !pinned_a.load() && !pinned_b.load() ? absl::StrCat(cpu_a, " nor to CPU ", cpu_b)
                                             : absl::StrCat(pinned_a.load() ? cpu_b : cpu_a)));
  }
  if (!served || !answered) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, " between CPUs ", cpu_a, " and ", cpu_b, " did not finish in ",
        absl::FormatDuration(court.timeout), ": is one of the CPUs busy?"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LineRoundTrip> ProbeLineRoundTrip(const LineProbeOptions& options) {
  if (options.batches < 1 || options.round_trips < 1 || options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the line probe needs at least one batch of at least one round trip and a timeout");
  }
  ASSIGN_OR_RETURN(const auto cpus, ChooseCpus(options));
  LineRoundTrip result;
  result.cpu_a = cpus.first;
  result.cpu_b = cpus.second;
  Court court;
  court.timeout = options.timeout;
  court.deadline = absl::Now() + options.timeout;
  const uint64_t per_batch = static_cast<uint64_t>(options.round_trips);
  const uint64_t total = per_batch * static_cast<uint64_t>(options.batches);
  std::vector<double> batch_ns;
  // B answers each odd value with the next even one.
  auto answer = [&] {
    for (uint64_t i = 0; i < total; ++i) {
      if (!WaitFor(court, 2 * i + 1)) return false;
      court.ball.value.store(2 * i + 2, std::memory_order_release);
    }
    return true;
  };
  auto serve = [&] {
    for (uint64_t i = 0; i < total;) {
      const absl::Time begin = absl::Now();
      for (uint64_t end = i + per_batch; i < end; ++i) {
        court.ball.value.store(2 * i + 1, std::memory_order_release);
        if (!WaitFor(court, 2 * i + 2)) return false;
      }
      batch_ns.push_back(absl::ToDoubleNanoseconds(absl::Now() - begin) /
                         static_cast<double>(per_batch));
    }
    return true;
  };
  RETURN_IF_ERROR(RunPinnedPair(court, result.cpu_a, result.cpu_b, "the line probe", serve,
                                answer));
  std::nth_element(batch_ns.begin(), batch_ns.begin() + batch_ns.size() / 2, batch_ns.end());
  result.round_trip_ns = batch_ns[batch_ns.size() / 2];
  return result;
}

absl::StatusOr<CopyRound> ProbeCopyRound(const LineProbeOptions& options, size_t bytes,
                                         size_t streaming_min, int iterations) {
  if (bytes < 8 || bytes % 8 != 0 || bytes > (size_t{1} << 30) || iterations < 1 ||
      options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a copy round needs a size that is a multiple of 8 from 8 bytes to 1 GiB (not ", bytes,
        "), at least one iteration and a timeout"));
  }
  ASSIGN_OR_RETURN(const auto cpus, ChooseCpus(options));
  std::vector<uint64_t> source(bytes / 8), target(bytes / 8);
  for (size_t i = 0; i < source.size(); ++i) source[i] = i * 0x9E3779B97F4A7C15ull;
  Court court;
  court.timeout = options.timeout;
  court.deadline = absl::Now() + options.timeout;
  const uint64_t rounds = static_cast<uint64_t>(iterations) + 1;
  absl::Duration measured;
  uint64_t stale = 0;
  // A copies and raises 2i+1; B reads every word, checks the sum (each
  // round's copy carries the round's number in its first and last word)
  // and answers 2i+2.
  uint64_t middle = 0;
  for (size_t i = 1; i + 1 < source.size(); ++i) middle += source[i];
  auto serve = [&] {
    absl::Time begin;
    for (uint64_t i = 0; i < rounds; ++i) {
      if (i == 1) begin = absl::Now();  // round 0 warms both caches up
      source.front() = i;
      source.back() = i;
      CopyToPeer(target.data(), source.data(), bytes, streaming_min);
      court.ball.value.store(2 * i + 1, std::memory_order_release);
      if (!WaitFor(court, 2 * i + 2)) return false;
    }
    measured = absl::Now() - begin;
    return true;
  };
  auto answer = [&] {
    for (uint64_t i = 0; i < rounds; ++i) {
      if (!WaitFor(court, 2 * i + 1)) return false;
      uint64_t sum = 0;
      for (uint64_t word : target) sum += word;
      const uint64_t want = source.size() == 1 ? i : middle + 2 * i;
      if (sum != want) ++stale;
      court.ball.value.store(2 * i + 2, std::memory_order_release);
    }
    return true;
  };
  RETURN_IF_ERROR(RunPinnedPair(court, cpus.first, cpus.second, "the copy probe", serve, answer));
  if (stale > 0) {
    return absl::InternalError(absl::StrCat("the copy probe's reader found other bytes than ",
                                            "were written in ", stale, " of ", rounds,
                                            " rounds"));
  }
  return CopyRound{bytes, streaming_min,
                   absl::ToDoubleMicroseconds(measured) / static_cast<double>(iterations)};
}

}  // namespace rdmaflow::bench
