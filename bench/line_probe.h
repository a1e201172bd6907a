// File: line_probe.h
// -----------------------------------------------------------------------------
// The machine's placement of two CPUs, measured: two threads, each pinned to
// one of them, hand one cache line back and forth, and the time of a round
// trip says how far apart the CPUs' caches are (tens of nanoseconds on one
// die, several times that across dies or sockets). On a VM it changes when
// the hypervisor moves the virtual CPUs, and with it every figure that
// moves data between processes (docs/benchmarks.md, "The machine's two
// placements"): benchmarks record it beside their figures, so that only
// figures taken in the same placement are compared.
//
//   ASSIGN_OR_RETURN(LineRoundTrip probe, ProbeLineRoundTrip({}));
//   // probe.cpu_a, probe.cpu_b, probe.round_trip_ns
#ifndef RDMAFLOW_BENCH_LINE_PROBE_H_
#define RDMAFLOW_BENCH_LINE_PROBE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rdmaflow::bench {

struct LineProbeOptions {
  // The two CPUs; -1: the first two this process may run on.
  int cpu_a = -1;
  int cpu_b = -1;
  // Batches of `round_trips` each; the result is the median batch's mean.
  int batches = 5;
  int round_trips = 4000;
  // A probe that takes longer (the other CPU busy with something else)
  // gives up with kDeadlineExceeded.
  absl::Duration timeout = absl::Seconds(2);
};

struct LineRoundTrip {
  int cpu_a = -1;
  int cpu_b = -1;
  double round_trip_ns = 0;
};

// A write into memory the other CPU reads next, as a transfer into a
// same-host peer is: thread A copies `bytes` into a buffer (CopyToPeer,
// common/peer_copy.h, streaming from `streaming_min`; 0: plainly) and
// raises a flag; thread B, on the other CPU, reads every word of the
// buffer, checks it holds that round's bytes, and answers. The mean of `iterations` such rounds, in
// microseconds, after one unmeasured round.
struct CopyRound {
  size_t bytes = 0;
  size_t streaming_min = 0;
  double round_us = 0;
};
absl::StatusOr<CopyRound> ProbeCopyRound(const LineProbeOptions& options, size_t bytes,
                                         size_t streaming_min, int iterations);

// Measures it with two threads of its own (the caller's affinity is left as
// it is). kInvalidArgument for bad options, one CPU named twice or a CPU this
// process may not run on; kFailedPrecondition where it may run on fewer than two CPUs (nothing
// to measure); kDeadlineExceeded as above; kInternal when a thread cannot be
// pinned.
absl::StatusOr<LineRoundTrip> ProbeLineRoundTrip(const LineProbeOptions& options);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_LINE_PROBE_H_
