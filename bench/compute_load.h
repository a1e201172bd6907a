// File: compute_load.h
// -----------------------------------------------------------------------------
// ComputeLoad: threads of busy floating-point work until Stop(), the
// training step's compute standing beside the communication, so that a
// collective is measured the way it runs when ranks share their cores
// with work (allreduce_bench --load, mpi_allreduce --load). Every
// implementation under comparison gets the same load in the same place:
// rank 0's process.
#ifndef RDMAFLOW_BENCH_COMPUTE_LOAD_H_
#define RDMAFLOW_BENCH_COMPUTE_LOAD_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace rdmaflow::bench {

// Thread-compatible; the load's threads share only their atomic count with
// the caller, which may read it at any time.
class ComputeLoad {
 public:
  explicit ComputeLoad(int threads);
  ~ComputeLoad() { Stop(); }
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;

  // Ends the threads; idempotent.
  void Stop();
  // Work done so far by all the threads, counted every 4096 iterations
  // while they run: sampled around a measurement, it says how much of the
  // machine the load got beside it (LoadRate below).
  uint64_t iterations() const { return iterations_.load(std::memory_order_relaxed); }
  // The threads started (0: no load).
  int threads() const { return threads_started_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> iterations_{0};
  std::vector<std::thread> threads_;
  int threads_started_ = 0;
};

// The load's work per second of wall time while `measure` ran: what the
// training step's compute would have got beside it. 0 without a load (null
// or no threads).
double LoadRate(const ComputeLoad* load, absl::FunctionRef<void()> measure);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_COMPUTE_LOAD_H_
