// File: int8_codec.cc
// -----------------------------------------------------------------------------
// 8-bit stochastic quantization with error feedback (QSGD-like, one scale per
// bucket). Two rounds:
//   1. an all-reduce (max) of each bucket's largest magnitude, so every
//      member quantizes a bucket against the same scale s;
//   2. each element becomes an integer level q in [-L, L] (x / s * L rounded
//      up or down at random, in proportion, so it is unbiased), and the
//      levels are summed by an all-reduce in float16, which holds every sum
//      of up to 2048 / L members' levels exactly. Each member's sum is then
//      sum(q) * s / L.
// L is 127 (8-bit levels) for up to 16 members, 2048 / members beyond. The
// wire carries 2 bytes an element (half of float32's), and the levels are
// what an 8-bit all-gather would carry.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"
#include "compression/selection.h"

namespace rdmaflow::compression::internal {
namespace {

// The largest integer float16 holds exactly, with every integer below it.
constexpr int kHalfExactIntegers = 2048;

// float16 of the levels -127..127 (index level + 127), and float32 of every
// float16 bit pattern: table lookups instead of conversions per element.
const uint16_t* LevelToHalf() {
  static const auto* table = [] {
    auto* t = new uint16_t[255];
    for (int q = -127; q <= 127; ++q) t[q + 127] = collectives::FloatToHalf(static_cast<float>(q));
    return t;
  }();
  return table;
}

const float* HalfToFloatTable() {
  static const auto* table = [] {
    auto* t = new float[65536];
    for (uint32_t h = 0; h < 65536; ++h) t[h] = collectives::HalfToFloat(static_cast<uint16_t>(h));
    return t;
  }();
  return table;
}

class Int8Codec final : public Codec {
 public:
  Int8Codec(const CodecContext& context, size_t count, bool feedback, size_t bucket)
      : Codec(context, count, feedback),
        feedback_(feedback),
        bucket_(bucket),
        buckets_((count + bucket - 1) / bucket),
        levels_(std::min(127, kHalfExactIntegers / context.world)),
        levels_offset_(RoundUp64(buckets_ * sizeof(float))),
        scales_(buckets_) {}

  std::string spec() const override {
    return absl::StrCat("int8:bucket=", bucket_, ",feedback=", feedback_ ? 1 : 0);
  }
  size_t scratch_bytes() const override {
    return levels_offset_ + RoundUp64(count() * sizeof(uint16_t));
  }

 private:
  absl::StatusOr<Round> DoBegin(uint64_t /*step*/, absl::Span<std::byte> scratch) override {
    absl::Span<const float> residual = this->residual();
    float* scales = reinterpret_cast<float*>(scratch.data());
    for (size_t b = 0; b < buckets_; ++b) {
      float most = 0.0f;
      const size_t end = std::min(count(), (b + 1) * bucket_);
      for (size_t i = b * bucket_; i < end; ++i) {
        const float m = std::fabs(residual[i]);
        most = std::isnan(m) ? INFINITY : std::max(most, m);
      }
      scales[b] = most;
    }
    Round round;
    round.exchange = Exchange::kAllReduceMax;
    round.bytes = buckets_ * sizeof(float);
    return round;
  }

  absl::StatusOr<std::optional<Round>> DoNext(
      int round, absl::Span<std::byte> scratch,
      absl::Span<const absl::Span<const std::byte>> /*gathered*/, absl::Span<float> out,
      float scale) override {
    uint16_t* levels = reinterpret_cast<uint16_t*>(scratch.data() + levels_offset_);
    if (round == 0) {
      // The agreed scales landed in memory the members write: copied once,
      // checked and used (here and in round 1) only as the copy.
      std::memcpy(scales_.data(), scratch.data(), buckets_ * sizeof(float));
      for (size_t b = 0; b < buckets_; ++b) {
        if (!std::isfinite(scales_[b]) || scales_[b] < 0) {
          return absl::DataLossError(absl::StrCat(
              spec(), ": bucket ", b, "'s scale agreed by the members is ", scales_[b],
              " (a member's gradient holds inf or NaN, or a member sent a forged scale)"));
        }
      }
      Quantize(scales_.data(), levels);
      Round next;
      next.exchange = Exchange::kAllReduceSum;
      next.type = collectives::DataType::kFloat16;
      next.offset = levels_offset_;
      next.bytes = count() * sizeof(uint16_t);
      return std::optional<Round>(next);
    }
    const float bound = static_cast<float>(levels_) * static_cast<float>(context().world);
    const float* half_to_float = HalfToFloatTable();
    for (size_t i = 0; i < count(); ++i) {
      const float sum = half_to_float[levels[i]];  // read once: any level indexes the table
      if (!(std::fabs(sum) <= bound)) {
        return absl::DataLossError(absl::StrCat(
            spec(), ": element ", i, "'s level sum is ", sum, ", beyond the ", bound,
            " that ", context().world, " members of levels in [-", levels_, ", ", levels_,
            "] can reach (a member sent forged levels)"));
      }
      out[i] = sum * (scales_[i / bucket_] / static_cast<float>(levels_)) * scale;
    }
    return std::optional<Round>();
  }

  // Each residual element to a level against its bucket's agreed scale;
  // what the level stands for is taken out of the residual.
  void Quantize(const float* scales, uint16_t* levels) {
    absl::Span<float> residual = mutable_residual();
    SplitMix64 rng(StreamSeed(context().seed, kInt8Rounding, step(),
                              static_cast<uint64_t>(context().rank)));
    const uint16_t* to_half = LevelToHalf();
    const float top = static_cast<float>(levels_);
    uint64_t bits = 0;
    for (size_t b = 0; b < buckets_; ++b) {
      const float s = scales[b];
      const size_t end = std::min(count(), (b + 1) * bucket_);
      if (!(s > 0)) {
        for (size_t i = b * bucket_; i < end; ++i) levels[i] = to_half[127];
        continue;
      }
      const float to_level = top / s;
      const float step_value = s / top;
      if (!std::isfinite(to_level)) {
        // A scale so small (below 127/FLT_MAX) that its levels overflow:
        // nothing of this bucket is sent this step; it stays in the residual.
        for (size_t i = b * bucket_; i < end; ++i) levels[i] = to_half[127];
        continue;
      }
      for (size_t i = b * bucket_, j = 0; i < end; ++i, ++j) {
        const float v = std::clamp(residual[i] * to_level, -top, top);
        const float lower = std::floor(v);
        // 32 random bits an element, two from each draw of the bucket's.
        if ((j & 1) == 0) bits = rng.Next();
        const float u = static_cast<float>((bits >> ((j & 1) * 32 + 8)) & 0xffffff) * 0x1.0p-24f;
        float q = std::clamp(lower + (u < v - lower ? 1.0f : 0.0f), -top, top);
        if (!(q == q)) q = 0.0f;  // NaN: not a level; never cast
        residual[i] -= q * step_value;
        levels[i] = to_half[static_cast<int>(q) + 127];
      }
    }
  }

  const bool feedback_;
  const size_t bucket_;
  const size_t buckets_;
  const int levels_;  // L
  const size_t levels_offset_;
  std::vector<float> scales_;  // this step's agreed scales, checked
};

}  // namespace

absl::StatusOr<std::unique_ptr<Codec>> MakeInt8(KeyValueParams& settings,
                                                const CodecContext& context, size_t count,
                                                bool feedback) {
  int64_t bucket = 512;
  RETURN_IF_ERROR(settings.Int("bucket", int64_t{1}, &bucket));
  RETURN_IF_ERROR(settings.Done());
  if (count == 0) return std::unique_ptr<Codec>();
  if (context.world > kHalfExactIntegers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int8 sums levels exactly in float16 for up to ", kHalfExactIntegers,
        " members, not ", context.world));
  }
  return std::unique_ptr<Codec>(
      new Int8Codec(context, count, feedback, std::min<size_t>(bucket, count)));
}

}  // namespace rdmaflow::compression::internal
