// File: allreduce_sweep.cc
#include "bench/allreduce_sweep.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "results/json.h"

namespace rdmaflow::bench {

absl::Status CheckSweepOptions(const SweepOptions& options) {
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  if (options.min_bytes < 4 || options.min_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_bytes=", options.min_bytes,
        ": expected a positive multiple of 4 (float32 elements)"));
  }
  if (options.max_bytes < options.min_bytes || options.max_bytes > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_bytes=", options.max_bytes, ": expected ",
                     options.min_bytes, " (--min_bytes) .. ", kMaxBytes));
  }
  if (options.factor < 2 || options.factor > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--factor=", options.factor, ": expected an integer in 2 .. 1024"));
  }
  if (options.byte_budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--byte_budget=", options.byte_budget, ": expected at least 1"));
  }
  if (options.max_iters < options.min_iters) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_iters=", options.max_iters, ": expected at least ",
                     options.min_iters));
  }
  return absl::OkStatus();
}

std::vector<int64_t> SweepSizes(const SweepOptions& options) {
  std::vector<int64_t> sizes;
  for (int64_t b = options.min_bytes; b <= options.max_bytes;
       b *= std::max<int64_t>(options.factor, 2)) {
    sizes.push_back(b);
  }
  return sizes;
}

int Iterations(const SweepOptions& options, int64_t bytes) {
  const int64_t n = options.byte_budget / std::max<int64_t>(bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(n, options.min_iters, options.max_iters));
}

double TimeCalls(int warmup, int iterations, absl::FunctionRef<void()> op) {
  for (int i = 0; i < warmup; ++i) op();
  const absl::Time begin = absl::Now();
  for (int i = 0; i < iterations; ++i) op();
  return absl::ToDoubleMicroseconds(absl::Now() - begin) / std::max(iterations, 1);
}

AllReduceRow MakeRow(const std::string& impl, int ranks, int64_t bytes,
                     int iterations, double time_us) {
  AllReduceRow row;
  row.set_impl(impl);
  row.set_ranks(ranks);
  row.set_bytes(static_cast<double>(bytes));
  row.set_iterations(iterations);
  row.set_time_us(time_us);
  row.set_algbw_gbps(bytes / (time_us * 1e3));
  row.set_busbw_gbps(row.algbw_gbps() * 2.0 * (ranks - 1) / ranks);
  return row;
}

double MemcpyGbps(int64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  const int iterations = std::max<int>(3, static_cast<int>((int64_t{512} << 20) / bytes));
  const double us = TimeCalls(1, iterations, [&] {
    std::memcpy(b.data(), a.data(), bytes);
    std::swap(a, b);
  });
  return bytes / (us * 1e3);
}

double ReduceGbps(int64_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 0.f), b(n, 0.f);
  const int iterations = std::max<int>(3, static_cast<int>((int64_t{512} << 20) / bytes));
  // The library's own kernel (vectorized where the CPU allows): the bound
  // every algorithm's reductions run at.
  const double us = TimeCalls(1, iterations, [&] {
    collectives::Reduce(collectives::DataType::kFloat32, collectives::ReduceOp::kSum, a.data(),
                        b.data(), n);
  });
  return bytes / (us * 1e3);
}

void PrintRows(const std::vector<AllReduceRow>& rows) {
  std::printf("%-20s %5s %11s %6s %11s %10s %10s %-21s %9s\n", "impl", "ranks", "bytes",
              "iters", "time_us", "algbw_GB/s", "busbw_GB/s", "algorithm", "reduce_GB/s");
  for (const AllReduceRow& r : rows) {
    std::printf("%-20s %5d %11.0f %6d %11.1f %10.3f %10.3f %-21s %9.2f\n", r.impl().c_str(),
                r.ranks(), r.bytes(), r.iterations(), r.time_us(), r.algbw_gbps(),
                r.busbw_gbps(), r.algorithm().empty() ? "-" : r.algorithm().c_str(),
                r.reduce_bound_gbps());
  }
  std::fflush(stdout);
}

absl::Status WriteRowsJson(const std::string& path, const results::RunInfo& run,
                           double memcpy_gbps, double reduce_gbps,
                           const std::vector<AllReduceRow>& rows) {
  results::BenchmarkReport report;
  *report.mutable_run() = run;
  results::AllReduceResults& allreduce = *report.mutable_allreduce();
  allreduce.set_memcpy_gbps(memcpy_gbps);
  allreduce.set_reduce_gbps(reduce_gbps);
  for (const AllReduceRow& row : rows) *allreduce.add_rows() = row;
  return results::WriteJsonFile(report, path);
}

}  // namespace rdmaflow::bench
