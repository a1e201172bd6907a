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

#include "absl/status/statusor.h"
#include "rdma/store.h"
#include "rdma/transport.h"

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
  bool reads = true;
  std::string ns = "pingpong";
  absl::Duration timeout = absl::Seconds(120);
  // Called by rank 0 after each size ("progress"), may be empty.
  std::function<void(size_t bytes)> on_size_done;
  // Called by rank 0 once connected, with Endpoint::Describe(); may be empty.
  std::function<void(const std::string&)> on_connected;
};

// One row of results (rank 0 only).
struct PingPongRow {
  std::string op;  // "write" (with notification) or "read".
  size_t bytes = 0;
  int iterations = 0;
  double bw_peak_mbps = 0;  // MB/s = 1e6 B/s.
  double bw_avg_mbps = 0;
  double msg_rate_mops = 0;
  // One-way latency: half the ping-pong round trip for writes, the whole
  // completion time for reads (a read is a round trip by nature).
  double lat_min_us = 0, lat_p50_us = 0, lat_p99_us = 0, lat_p999_us = 0;
  double memcpy_mbps = 0;
  double ratio_to_memcpy = 0;  // bw_avg / memcpy.
};

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
