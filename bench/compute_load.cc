// File: compute_load.cc
#include "bench/compute_load.h"

#include <chrono>

namespace rdmaflow::bench {

ComputeLoad::ComputeLoad(int threads) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this, t] {
      double x = 1.0 + t;
      while (!stop_.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 4096; ++i) x = x * 1.0000001 + 1e-9;
        // x is never negative: the branch keeps the loop from being
        // optimized away.
        iterations_.fetch_add(x > 0 ? 4096 : 4097, std::memory_order_relaxed);
      }
    });
  }
  threads_started_ = threads;
}

void ComputeLoad::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

double LoadRate(const ComputeLoad* load, absl::FunctionRef<void()> measure) {
  if (load == nullptr || load->threads() == 0) {
    measure();
    return 0;
  }
  const uint64_t before = load->iterations();
  const auto begin = std::chrono::steady_clock::now();
  measure();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
  const uint64_t done = load->iterations() - before;
  return took.count() > 0 ? static_cast<double>(done) / took.count() : 0;
}

}  // namespace rdmaflow::bench
