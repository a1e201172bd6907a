// codec_benchmark: encode and decode throughput of each gradient codec
// (compression/codec.h) on one thread, next to memcpy of the same float32
// gradient, Google Benchmark. One member, so every round's exchange is the
// codec's own data and only the codec's work is timed (manual time):
//
//   BM_Encode/<codec>/<elements>   Begin() and every round but the last:
//                                  error feedback, selection or
//                                  quantization, writing the scratch;
//   BM_Decode/<codec>/<elements>   the last round: the decoded sum;
//   BM_Memcpy/<elements>           memcpy of the gradient's bytes.
//
// Bytes processed are the float32 gradient's, so the GB/s columns compare
// directly with memcpy's.
//   bazel run -c opt //bench:codec_benchmark -- --benchmark_filter=topk
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "compression/codec.h"

namespace rdmaflow::compression {
namespace {

constexpr int64_t kMin = 1 << 16;  // 256 KiB of float32
constexpr int64_t kMax = 1 << 22;  // 16 MiB

std::vector<float> Gradient(size_t count) {
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

void BM_Codec(benchmark::State& state, const char* spec, bool decode) {
  const size_t count = static_cast<size_t>(state.range(0));
  auto made = CreateCodec(spec, CodecContext{}, count);
  if (!made.ok()) {
    state.SkipWithError(std::string(made.status().message()).c_str());
    return;
  }
  std::unique_ptr<Codec> codec = std::move(made).value();
  const std::vector<float> gradient = Gradient(count);
  std::vector<float> out(count);
  std::vector<std::byte> scratch(codec->scratch_bytes());
  uint64_t step = 0;
  for (auto _ : state) {
    using Clock = std::chrono::steady_clock;
    Clock::duration encode{}, decode_time{};
    auto begin = Clock::now();
    absl::StatusOr<Round> round = codec->Begin(gradient, step++, absl::MakeSpan(scratch));
    encode += Clock::now() - begin;
    if (!round.ok()) {
      state.SkipWithError(std::string(round.status().message()).c_str());
      return;
    }
    for (;;) {
      std::vector<absl::Span<const std::byte>> gathered;
      if (round->exchange == Exchange::kAllGather) {
        gathered.emplace_back(scratch.data() + round->offset, round->bytes);
      }
      begin = Clock::now();
      absl::StatusOr<std::optional<Round>> next =
          codec->Next(absl::MakeSpan(scratch), gathered, absl::MakeSpan(out), 1.0f);
      const Clock::duration spent = Clock::now() - begin;
      if (!next.ok()) {
        state.SkipWithError(std::string(next.status().message()).c_str());
        return;
      }
      if (!next->has_value()) {
        decode_time += spent;
        break;
      }
      encode += spent;
      *round = **next;
    }
    benchmark::ClobberMemory();
    state.SetIterationTime(
        std::chrono::duration<double>(decode ? decode_time : encode).count());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(count * sizeof(float)));
  state.SetLabel(codec->spec());
}

#define RDMAFLOW_CODEC_BENCHMARK(name, spec)                                        \
  BENCHMARK_CAPTURE(BM_Codec, name##_encode, spec, false)                           \
      ->RangeMultiplier(8)                                                          \
      ->Range(kMin, kMax)                                                           \
      ->UseManualTime();                                                            \
  BENCHMARK_CAPTURE(BM_Codec, name##_decode, spec, true)                            \
      ->RangeMultiplier(8)                                                          \
      ->Range(kMin, kMax)                                                           \
      ->UseManualTime()

RDMAFLOW_CODEC_BENCHMARK(topk, "topk:ratio=0.01");
RDMAFLOW_CODEC_BENCHMARK(topk_sampled, "topk:ratio=0.01,sampled=1");
RDMAFLOW_CODEC_BENCHMARK(randomk, "randomk:ratio=0.01");
RDMAFLOW_CODEC_BENCHMARK(int8, "int8");
RDMAFLOW_CODEC_BENCHMARK(sketch, "sketch:rows=3");

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * sizeof(float);
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Memcpy)->RangeMultiplier(8)->Range(kMin, kMax);

}  // namespace
}  // namespace rdmaflow::compression

// main(): bench/benchmark_main.cc.
