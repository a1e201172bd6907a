// File: pingpong.h
// -----------------------------------------------------------------------------
// The ping-pong measurement behind bench/transport_pingpong: perftest-style
// write and read latency and bandwidth between rank 0 and rank 1 over any
// Transport, plus single-thread memcpy at each size as the physical limit of
// a one-sided transfer between two processes of one machine.
#ifndef RDMAFLOW_BENCH_PINGPONG_H_
#define RDMAFLOW_BENCH_PINGPONG_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "results/results.pb.h"

namespace rdmaflow::bench {

struct PingPongOptions {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  // Bytes moved per size and measurement; iterations = budget / size,
  // clamped to [min_iters, max_iters].
  size_t byte_budget = size_t{1} << 30;
  int min_iters = 16;
  int max_iters = 2000;
  int window = 32;  // Writes/reads in flight in the bandwidth runs.
  bool writes = true;  // The write ping-pong and write bandwidth.
  bool reads = true;   // One-sided reads (latency and bandwidth).
  // > 0 (with reads): at each size also a few reads while their owner
  // serves kOwnerServe, then computes this long without progressing, then
  // serves again (PingPongRow.busy_read_p50_us).
  absl::Duration owner_busy = absl::ZeroDuration();
  std::string ns = "pingpong";
  absl::Duration timeout = absl::Seconds(120);
  // Called by rank 0 after each size ("progress"), may be empty.
  std::function<void(size_t bytes)> on_size_done;
  // Called by rank 0 once connected, with Endpoint::Describe(); may be empty.
  std::function<void(const std::string&)> on_connected;
  // The memory both ranks write from and into (e.g. device memory through
  // rdma/device), and how to fill a region with one byte value; empty: the
  // transport's host memory, filled with memset.
  std::function<absl::StatusOr<rdma::MemoryRegion>(size_t bytes)> allocate;
  std::function<absl::Status(rdma::MemoryRegion& region, unsigned char value)> fill;
  // The copy each size is compared with (MB/s, the `memcpy` column), for
  // `bytes` and `iterations`; empty: MeasureMemcpy.
  std::function<absl::StatusOr<double>(size_t bytes, int iterations)> reference;
  // Reads of that memory need the target's CPU (the device transport's
  // staged path: the target answers each read): the target spins rather
  // than sleeping between looks, as with UCX over TCP.
  bool reads_need_target = false;
  // How a ping-pong write announces itself. kNotification: a notified write
  // (Endpoint::PostWrite with a notification; the peer takes it from
  // PollNotification). kFlagWord: a flagged write whose flag lies right
  // behind the data, polled by the peer in its own memory, as perftest's
  // latency tests poll the last byte; needs Capabilities::flag_writes.
  // Bound once per size (Endpoint::BindFlaggedWrite), as a loop that sends
  // one buffer to one place would, and posted with no completion where the
  // write is done at once (BoundFlaggedWrite::TryPostInline: the peer's
  // answer says it arrived), else with one; kFlagWordSignalled: bound, each
  // post with a completion (BoundFlaggedWrite::Post); kFlagWordUnbound:
  // each posted through Endpoint::PostWriteWithFlag, which checks and looks
  // up its slices.
  enum class Signal { kNotification, kFlagWord, kFlagWordSignalled, kFlagWordUnbound };
  Signal signal = Signal::kNotification;
  // How each read is posted. kPosted: Endpoint::PostRead, checked and
  // looked up each time; kBound: bound once per size (Endpoint::BindRead),
  // a completion each post; kInline: bound, and done inline with no
  // completion where the backend reads at once (BoundRead::TryPostInline).
  enum class ReadPost { kPosted, kBound, kInline };
  ReadPost read_post = ReadPost::kPosted;
};

// One row of results (rank 0 only): one size and operation; the fields are
// described in results/results.proto.
using results::PingPongRow;

// Runs the benchmark as `transport.rank()` (0 or 1) against the other rank.
// Rank 0 returns the rows; rank 1 returns an empty vector.
absl::StatusOr<std::vector<PingPongRow>> RunPingPong(
    rdma::Transport& transport, rdma::Store& store,
    const PingPongOptions& options);

// Single-thread memcpy bandwidth (MB/s) for `bytes`-sized copies between two
// distinct buffers.
double MeasureMemcpy(size_t bytes, int iterations);

// Percentile (0..100) of unsorted samples.
double Percentile(std::vector<double> samples, double percentile);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_PINGPONG_H_
