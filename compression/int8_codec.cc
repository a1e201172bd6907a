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

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"
#include "compression/selection.h"

namespace rdmaflow::compression::internal {
namespace {

// The largest integer float16 holds exactly, with every integer below it.
constexpr int kHalfExactIntegers = 2048;

class Int8Codec final : public Codec {
 public:
  Int8Codec(const CodecContext& context, size_t count, bool feedback, size_t bucket)
      : Codec(context, count, feedback),
        feedback_(feedback),
        bucket_(bucket),
        buckets_((count + bucket - 1) / bucket),
        levels_(std::min(127, kHalfExactIntegers / context.world)),
        levels_offset_(RoundUp64(buckets_ * sizeof(float))) {}

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
    const float* scales = reinterpret_cast<const float*>(scratch.data());
    uint16_t* levels = reinterpret_cast<uint16_t*>(scratch.data() + levels_offset_);
    if (round == 0) {
      for (size_t b = 0; b < buckets_; ++b) {
        if (!std::isfinite(scales[b]) || scales[b] < 0) {
          return absl::DataLossError(absl::StrCat(
              spec(), ": bucket ", b, "'s scale agreed by the members is ", scales[b],
              " (a member's gradient holds inf or NaN, or a member sent a forged scale)"));
        }
      }
      Quantize(scales, levels);
      Round next;
      next.exchange = Exchange::kAllReduceSum;
      next.type = collectives::DataType::kFloat16;
      next.offset = levels_offset_;
      next.bytes = count() * sizeof(uint16_t);
      return std::optional<Round>(next);
    }
    const float bound = static_cast<float>(levels_) * static_cast<float>(context().world);
    for (size_t i = 0; i < count(); ++i) {
      const float sum = collectives::HalfToFloat(levels[i]);
      if (!(std::fabs(sum) <= bound)) {
        return absl::DataLossError(absl::StrCat(
            spec(), ": element ", i, "'s level sum is ", sum, ", beyond the ", bound,
            " that ", context().world, " members of levels in [-", levels_, ", ", levels_,
            "] can reach (a member sent forged levels)"));
      }
      out[i] = sum * (scales[i / bucket_] / static_cast<float>(levels_)) * scale;
    }
    return std::optional<Round>();
  }

  // Each residual element to a level against its bucket's agreed scale;
  // what the level stands for is taken out of the residual.
  void Quantize(const float* scales, uint16_t* levels) {
    absl::Span<float> residual = mutable_residual();
    SplitMix64 rng(StreamSeed(context().seed, kInt8Rounding, step(),
                              static_cast<uint64_t>(context().rank)));
    const float top = static_cast<float>(levels_);
    for (size_t i = 0; i < count(); ++i) {
      const float s = scales[i / bucket_];
      float q = 0.0f;
      if (s > 0) {
        const float v = std::clamp(residual[i] / s * top, -top, top);
        const float lower = std::floor(v);
        q = lower + (rng.Uniform() < static_cast<double>(v - lower) ? 1.0f : 0.0f);
        q = std::clamp(q, -top, top);
        residual[i] -= q * (s / top);
      }
      levels[i] = collectives::FloatToHalf(q);
    }
  }

  const bool feedback_;
  const size_t bucket_;
  const size_t buckets_;
  const int levels_;  // L
  const size_t levels_offset_;
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
