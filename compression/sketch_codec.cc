// File: sketch_codec.cc
// -----------------------------------------------------------------------------
// Count-Sketch selection with error feedback (the gs-SGD scheme; Sketched-SGD
// by Ivkin et al., NeurIPS 2019). Two rounds:
//   1. each member sketches its residual into rows x cols counters (row r
//      adds sign_r(i) * x[i] into counter bucket_r(i), with hashes from the
//      shared seed); sketches are linear, so an all-reduce (sum) of them is
//      the sketch of the members' summed residual;
//   2. every member estimates each element of that sum (the median over
//      rows of sign * counter), takes the k largest estimates (the heavy
//      hitters; the same on every member, since the summed sketch is), and
//      the exact values there are summed by an all-reduce of k floats.
// The wire carries rows * cols + k floats, whatever the members' number.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"
#include "compression/selection.h"

namespace rdmaflow::compression::internal {
namespace {

constexpr int kMaxRows = 64;

class SketchCodec final : public Codec {
 public:
  SketchCodec(const CodecContext& context, size_t count, bool feedback, int rows, size_t cols,
              size_t k)
      : Codec(context, count, feedback),
        feedback_(feedback),
        rows_(rows),
        k_(k),
        hash_{StreamSeed(context.seed, kSketchHashes, 0), cols},
        values_offset_(RoundUp64(static_cast<size_t>(rows) * cols * sizeof(float))),
        estimates_(count) {}

  std::string spec() const override {
    return absl::StrCat("sketch:rows=", rows_, ",cols=", hash_.cols, ",k=", k_,
                        ",feedback=", feedback_ ? 1 : 0);
  }
  size_t scratch_bytes() const override {
    return values_offset_ + RoundUp64(k_ * sizeof(float));
  }
  absl::Span<const uint32_t> sent() const override { return hitters_; }

 private:
  absl::StatusOr<Round> DoBegin(uint64_t /*step*/, absl::Span<std::byte> scratch) override {
    float* table = reinterpret_cast<float*>(scratch.data());
    std::fill(table, table + static_cast<size_t>(rows_) * hash_.cols, 0.0f);
    absl::Span<const float> residual = this->residual();
    for (int r = 0; r < rows_; ++r) {
      float* row = table + static_cast<size_t>(r) * hash_.cols;
      for (size_t i = 0; i < count(); ++i) {
        const uint64_t h = hash_.Hash(r, static_cast<uint32_t>(i));
        row[hash_.Bucket(h)] += SketchHash::Sign(h) * residual[i];
      }
    }
    Round round;
    round.bytes = static_cast<size_t>(rows_) * hash_.cols * sizeof(float);
    return round;
  }

  absl::StatusOr<std::optional<Round>> DoNext(
      int round, absl::Span<std::byte> scratch,
      absl::Span<const absl::Span<const std::byte>> /*gathered*/, absl::Span<float> out,
      float scale) override {
    float* values = reinterpret_cast<float*>(scratch.data() + values_offset_);
    if (round == 0) {
      Estimate(reinterpret_cast<const float*>(scratch.data()));
      hitters_ = TopKIndices(estimates_, k_);
      absl::Span<float> residual = mutable_residual();
      for (size_t j = 0; j < hitters_.size(); ++j) {
        values[j] = residual[hitters_[j]];
        residual[hitters_[j]] = 0.0f;  // sent
      }
      Round next;
      next.offset = values_offset_;
      next.bytes = hitters_.size() * sizeof(float);
      return std::optional<Round>(next);
    }
    ScatterScaled(hitters_, values, out, scale);
    return std::optional<Round>();
  }

  // estimates_[i]: the median over rows of sign * counter.
  void Estimate(const float* table) {
    float row_estimates[kMaxRows];
    for (size_t i = 0; i < count(); ++i) {
      const uint32_t at = static_cast<uint32_t>(i);
      for (int r = 0; r < rows_; ++r) {
        const uint64_t h = hash_.Hash(r, at);
        row_estimates[r] =
            SketchHash::Sign(h) * table[static_cast<size_t>(r) * hash_.cols + hash_.Bucket(h)];
      }
      std::nth_element(row_estimates, row_estimates + rows_ / 2, row_estimates + rows_,
                       [](float a, float b) { return a < b || (a == a && b != b); });
      estimates_[i] = row_estimates[rows_ / 2];
    }
  }

  const bool feedback_;
  const int rows_;
  const size_t k_;
  const SketchHash hash_;
  const size_t values_offset_;
  std::vector<float> estimates_;
  std::vector<uint32_t> hitters_;  // this step's
};

}  // namespace

absl::StatusOr<std::unique_ptr<Codec>> MakeSketch(KeyValueParams& settings,
                                                  const CodecContext& context, size_t count,
                                                  bool feedback) {
  int rows = 3;
  int64_t cols = 0;
  int64_t k = 0;
  RETURN_IF_ERROR(settings.Int("rows", 1, &rows));
  RETURN_IF_ERROR(settings.Int("cols", int64_t{1}, &cols));
  RETURN_IF_ERROR(settings.Int("k", int64_t{1}, &k));
  RETURN_IF_ERROR(settings.Done());
  if (rows > kMaxRows || cols > (int64_t{1} << 28) || k > int64_t{UINT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sketch needs rows <= ", kMaxRows, ", cols <= 2^28 and k < 2^32; got rows ", rows,
        ", cols ", cols, ", k ", k));
  }
  if (count == 0) return std::unique_ptr<Codec>();
  // Defaults: 1% of the elements, counters for twice as many per row. A k
  // beyond the tensor (a small bucket of a model's) takes all of it.
  const size_t hitters =
      k > 0 ? std::min(static_cast<size_t>(k), count) : RatioToK(0.01, count);
  const size_t counters = cols > 0 ? static_cast<size_t>(cols)
                                   : std::clamp<size_t>(2 * hitters, 64, size_t{1} << 28);
  return std::unique_ptr<Codec>(
      new SketchCodec(context, count, feedback, rows, counters, hitters));
}

}  // namespace rdmaflow::compression::internal
