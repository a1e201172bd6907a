// host_paths_benchmark: the kernels of the same-host all-reduce
// (collectives/host_allreduce.h), one thread each, Google Benchmark:
//
//   BM_Reduce<type>/bytes         dst op= src, both in this thread's cache
//                                 or memory: the reduction's bound;
//   BM_ReduceFromOtherCore/bytes  the same, src last written by a thread on
//                                 the other core (what a member meets when
//                                 it reduces a peer's freshly written
//                                 gradients);
//   BM_CopyFromOtherCore/bytes    memcpy out of such a buffer (the
//                                 all-gather's copy of a peer's reduced
//                                 segment);
//   BM_CopyLocal/bytes            memcpy within this thread's memory.
//
// The "other core" cases pin the writer and the timed thread to different
// CPUs (skipped, with a message, on a one-CPU machine) and time only the
// read side (manual time), so the figures show what cache-line migration
// between cores costs against the local kernel.
//   bazel run -c opt //bench:host_paths_benchmark -- --benchmark_filter=OtherCore
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "collectives/reduce.h"

namespace rdmaflow::collectives {
namespace {

constexpr int64_t kMin = 4 << 10;
constexpr int64_t kMax = 16 << 20;

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

template <DataType kType>
void BM_Reduce(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / ElementSize(kType);
  std::vector<std::byte> dst(bytes), src(bytes);
  for (auto _ : state) {
    Reduce(kType, ReduceOp::kSum, dst.data(), src.data(), count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
BENCHMARK_TEMPLATE(BM_Reduce, DataType::kFloat32)->RangeMultiplier(4)->Range(kMin, kMax);
BENCHMARK_TEMPLATE(BM_Reduce, DataType::kBFloat16)->RangeMultiplier(16)->Range(kMin, kMax);
BENCHMARK_TEMPLATE(BM_Reduce, DataType::kFloat16)->RangeMultiplier(16)->Range(kMin, kMax);

void BM_CopyLocal(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> dst(bytes), src(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
BENCHMARK(BM_CopyLocal)->RangeMultiplier(4)->Range(kMin, kMax);

// A thread on CPU 1 that rewrites `buffer` whenever asked, so each timed
// read on CPU 0 finds the lines modified in the other core's cache (or,
// with `read_only`, only reads it: the lines are then shared, and a store
// on CPU 0 must invalidate the other core's copies first).
class OtherCoreWriter {
 public:
  explicit OtherCoreWriter(std::vector<std::byte>& buffer, bool read_only = false)
      : buffer_(buffer), read_only_(read_only), thread_([this] { Run(); }) {}
  ~OtherCoreWriter() {
    stop_.store(true);
    thread_.join();
  }
  // Blocks until the buffer was rewritten on the other core.
  void Rewrite() {
    const uint64_t want = asked_.fetch_add(1) + 1;
    while (done_.load(std::memory_order_acquire) != want) {
    }
  }
  bool pinned() const { return pinned_.load(); }

 private:
  void Run() {
    pinned_ = Pin(1);
    uint64_t seen = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t asked = asked_.load(std::memory_order_acquire);
      if (asked == seen) continue;
      if (read_only_) {
        uint64_t sum = 0;
        for (size_t i = 0; i < buffer_.size(); i += 64) sum += static_cast<uint8_t>(buffer_[i]);
        sink_.store(sum, std::memory_order_relaxed);
      } else {
        std::memset(buffer_.data(), static_cast<int>(asked & 0x3f), buffer_.size());
      }
      seen = asked;
      done_.store(asked, std::memory_order_release);
    }
  }

  std::vector<std::byte>& buffer_;
  const bool read_only_;
  std::atomic<uint64_t> asked_{0}, done_{0}, sink_{0};
  std::atomic<bool> stop_{false}, pinned_{false};
  std::thread thread_;
};

// `shared_dst`: the other core reads dst (instead of writing src) before
// each timed call, as peers read a member's buffer between calls.
template <typename Read>
void FromOtherCore(benchmark::State& state, Read read, bool shared_dst = false) {
  if (std::thread::hardware_concurrency() < 2 || !Pin(0)) {
    state.SkipWithError("needs two CPUs to pin the writer and the reader apart");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> dst(bytes), src(bytes);
  OtherCoreWriter writer(shared_dst ? dst : src, shared_dst);
  for (auto _ : state) {
    writer.Rewrite();
    const auto start = std::chrono::steady_clock::now();
    read(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}

void BM_ReduceFromOtherCore(benchmark::State& state) {
  FromOtherCore(state, [](std::byte* dst, const std::byte* src, size_t bytes) {
    Reduce(DataType::kFloat32, ReduceOp::kSum, dst, src, bytes / 4);
  });
}
BENCHMARK(BM_ReduceFromOtherCore)->RangeMultiplier(4)->Range(kMin, kMax)->UseManualTime();

void BM_ReduceIntoLinesTheOtherCoreRead(benchmark::State& state) {
  FromOtherCore(
      state,
      [](std::byte* dst, const std::byte* src, size_t bytes) {
        Reduce(DataType::kFloat32, ReduceOp::kSum, dst, src, bytes / 4);
      },
      /*shared_dst=*/true);
}
BENCHMARK(BM_ReduceIntoLinesTheOtherCoreRead)
    ->RangeMultiplier(4)
    ->Range(kMin, kMax)
    ->UseManualTime();

void BM_CopyFromOtherCore(benchmark::State& state) {
  FromOtherCore(state, [](std::byte* dst, const std::byte* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
  });
}
BENCHMARK(BM_CopyFromOtherCore)->RangeMultiplier(4)->Range(kMin, kMax)->UseManualTime();

// Two members at once, as the 2-rank scatter-gather runs: each core reduces
// half of the other's buffer into its own (the lines the other core wrote
// last, in its previous copy), then copies the other's reduced half back,
// with a barrier between the phases. Time per round, both halves; bytes
// counted are one member's buffer.
// A buffer in a shared-memory file (as UCX's shared-memory regions are),
// mapped twice: `owner` and `peer` alias the same pages.
struct SharedBuffer {
  explicit SharedBuffer(size_t bytes) : size(bytes) {
    const int fd = memfd_create("host_paths_benchmark", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return;
    void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* b = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a == MAP_FAILED || b == MAP_FAILED) return;
    owner = static_cast<std::byte*>(a);
    peer = static_cast<std::byte*>(b);
    std::memset(owner, 0, bytes);
  }
  ~SharedBuffer() {
    if (owner != nullptr) munmap(owner, size);
    if (peer != nullptr) munmap(peer, size);
  }
  size_t size;
  std::byte* owner = nullptr;
  std::byte* peer = nullptr;
};

// `shared`: the buffers live in shared-memory files, each member working on
// its own mapping and reading the other's through a second one.
void TwoCoresScatterGather(benchmark::State& state, bool shared) {
  if (std::thread::hardware_concurrency() < 2 || !Pin(0)) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t half = bytes / 2;
  std::vector<std::byte> heap_a(shared ? 0 : bytes), heap_b(shared ? 0 : bytes);
  SharedBuffer shm_a(shared ? bytes : 0), shm_b(shared ? bytes : 0);
  if (shared && (shm_a.owner == nullptr || shm_b.owner == nullptr)) {
    state.SkipWithError("memfd_create/mmap failed");
    return;
  }
  struct View {
    std::byte* mine;
    std::byte* peer;
  };
  const View a = shared ? View{shm_a.owner, shm_b.peer} : View{heap_a.data(), heap_b.data()};
  const View b = shared ? View{shm_b.owner, shm_a.peer} : View{heap_b.data(), heap_a.data()};
  std::atomic<uint64_t> phase_a{0}, phase_b{0};
  std::atomic<bool> stop{false};
  // Member `mine` at position `p` (0 or 1); `peer` is the other's buffer.
  auto round = [&](const View& v, int p, std::atomic<uint64_t>& my_phase,
                   std::atomic<uint64_t>& their_phase, uint64_t r) {
    Reduce(DataType::kFloat32, ReduceOp::kSum, v.mine + p * half, v.peer + p * half, half / 4);
    my_phase.store(2 * r + 1, std::memory_order_release);
    while (their_phase.load(std::memory_order_acquire) < 2 * r + 1) {
    }
    std::memcpy(v.mine + (1 - p) * half, v.peer + (1 - p) * half, half);
    my_phase.store(2 * r + 2, std::memory_order_release);
    while (their_phase.load(std::memory_order_acquire) < 2 * r + 2) {
    }
  };
  std::atomic<uint64_t> go{0};
  std::thread other([&] {
    Pin(1);
    uint64_t r = 0;
    while (true) {
      while (go.load(std::memory_order_acquire) == r) {
        if (stop.load()) return;
      }
      ++r;
      round(b, 1, phase_b, phase_a, r);
    }
  });
  uint64_t r = 0;
  for (auto _ : state) {
    ++r;
    go.store(r, std::memory_order_release);
    round(a, 0, phase_a, phase_b, r);
  }
  stop = true;
  other.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
void BM_TwoCoresScatterGather(benchmark::State& state) { TwoCoresScatterGather(state, false); }
BENCHMARK(BM_TwoCoresScatterGather)->RangeMultiplier(4)->Range(kMin, kMax)->UseRealTime();

void BM_TwoCoresScatterGatherSharedMemory(benchmark::State& state) {
  TwoCoresScatterGather(state, true);
}
BENCHMARK(BM_TwoCoresScatterGatherSharedMemory)
    ->RangeMultiplier(4)
    ->Range(kMin, kMax)
    ->UseRealTime();

}  // namespace
}  // namespace rdmaflow::collectives

// main(): bench/benchmark_main.cc.
