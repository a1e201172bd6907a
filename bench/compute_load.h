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

namespace rdmaflow::bench {

// Thread-compatible; the load's threads share nothing with the caller.
class ComputeLoad {
 public:
  explicit ComputeLoad(int threads);
  ~ComputeLoad() { Stop(); }
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;

  // Ends the threads (their iterations are counted); idempotent.
  void Stop();
  // Work done so far by the threads that have stopped.
  uint64_t iterations() const { return iterations_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> iterations_{0};
  std::vector<std::thread> threads_;
};

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_COMPUTE_LOAD_H_
