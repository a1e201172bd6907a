// File: compute_load.cc
#include "bench/compute_load.h"

namespace rdmaflow::bench {

ComputeLoad::ComputeLoad(int threads) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this, t] {
      double x = 1.0 + t;
      uint64_t n = 0;
      while (!stop_.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 4096; ++i) x = x * 1.0000001 + 1e-9;
        n += 4096;
      }
      iterations_.fetch_add(n + (x > 0 ? 0 : 1));
    });
  }
}

void ComputeLoad::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace rdmaflow::bench
