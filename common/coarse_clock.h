// File: coarse_clock.h
// -----------------------------------------------------------------------------
// CoarseNow(): the wall-clock time to within a scheduler tick (1-4 ms), for
// deadlines and watchdog intervals checked in hot polling loops. It reads
// CLOCK_REALTIME_COARSE, which the vDSO serves from memory on every
// clocksource; absl::Now() may be a system call (about 1 us inside a VM
// whose clocksource is the HPET, as under QEMU's TCG). Comparable with
// absl::Now() (same epoch), lagging it by up to a tick: use it only where a
// few milliseconds of lateness do not matter.
#ifndef RDMAFLOW_COMMON_COARSE_CLOCK_H_
#define RDMAFLOW_COMMON_COARSE_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rdmaflow {

inline absl::Time CoarseNow() {
  timespec now;
  if (clock_gettime(CLOCK_REALTIME_COARSE, &now) != 0) return absl::Now();
  return absl::TimeFromTimespec(now);
}

// CLOCK_MONOTONIC_COARSE in nanoseconds, for intervals checked in hot
// polling loops: a read of the vDSO's page, with none of absl::Time's
// conversions.
inline int64_t CoarseMonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_COARSE_CLOCK_H_
