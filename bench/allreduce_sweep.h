// File: allreduce_sweep.h
// -----------------------------------------------------------------------------
// What the all-reduce benchmarks share (rdmaflow and Gloo in
// allreduce_bench, MPI in mpi_allreduce): the sizes swept, iterations per
// size, the nccl-tests bandwidth conventions, and the table/JSON output, so
// every implementation is measured and reported the same way. Rows are
// `results::AllReduceRow` (results/results.proto).
//   algorithm bandwidth = bytes / time
//   bus bandwidth       = algorithm bandwidth * 2 (n - 1) / n
// (the bus bandwidth of a ring is what each link carries; compare it with
// memcpy).
#ifndef RDMAFLOW_BENCH_ALLREDUCE_SWEEP_H_
#define RDMAFLOW_BENCH_ALLREDUCE_SWEEP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "results/results.pb.h"

namespace rdmaflow::bench {

struct SweepOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t factor = 4;                      // size step
  int64_t byte_budget = int64_t{256} << 20;  // per size: iterations = budget / size
  int min_iters = 5;
  int max_iters = 500;
};

using results::AllReduceRow;

// kInvalidArgument naming the flag (--min_bytes, --max_bytes, --factor,
// --byte_budget, --max_iters) when `options` cannot be swept: sizes are
// whole float32 counts from 4 bytes up, min <= max <= 1 TiB, a factor of
// at least 2, a positive budget, and max_iters >= min_iters.
absl::Status CheckSweepOptions(const SweepOptions& options);

std::vector<int64_t> SweepSizes(const SweepOptions& options);
int Iterations(const SweepOptions& options, int64_t bytes);

// Runs `op` `warmup` times, then `iterations` times, and returns the mean
// microseconds of the latter.
double TimeCalls(int warmup, int iterations, absl::FunctionRef<void()> op);

AllReduceRow MakeRow(const std::string& impl, int ranks, int64_t bytes,
                     int iterations, double time_us);

// Single-thread references on this machine: memcpy and a float32 sum
// (dst += src), in GB/s, for `bytes`.
double MemcpyGbps(int64_t bytes);
double ReduceGbps(int64_t bytes);

void PrintRows(const std::vector<AllReduceRow>& rows);

// Writes a `results::BenchmarkReport` of `run` and the all-reduce results
// (memcpy_gbps, reduce_gbps: 0 where not measured) to `path` as JSON
// (results/json.h); kUnavailable naming the path if it cannot be written.
absl::Status WriteRowsJson(const std::string& path, const results::RunInfo& run,
                           double memcpy_gbps, double reduce_gbps,
                           const std::vector<AllReduceRow>& rows);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_ALLREDUCE_SWEEP_H_
