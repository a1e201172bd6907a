// File: randomk_codec.cc
// -----------------------------------------------------------------------------
// random-k with error feedback: every member draws the same k indices from
// the shared seed and the step, so only the values travel, summed by an
// all-reduce of k floats; each member then scatters the sums back.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"
#include "compression/selection.h"

namespace rdmaflow::compression::internal {
namespace {

class RandomKCodec final : public Codec {
 public:
  RandomKCodec(const CodecContext& context, size_t count, bool feedback, double ratio)
      : Codec(context, count, feedback),
        ratio_(ratio),
        feedback_(feedback),
        k_(RatioToK(ratio, count)) {}

  std::string spec() const override {
    return absl::StrCat("randomk:ratio=", ratio_, ",feedback=", feedback_ ? 1 : 0);
  }
  size_t scratch_bytes() const override { return RoundUp64(k_ * sizeof(float)); }
  absl::Span<const uint32_t> sent() const override { return indices_; }

 private:
  absl::StatusOr<Round> DoBegin(uint64_t step, absl::Span<std::byte> scratch) override {
    indices_ = DrawIndices(count(), k_, StreamSeed(context().seed, kRandomKIndices, step));
    absl::Span<float> residual = mutable_residual();
    float* values = reinterpret_cast<float*>(scratch.data());
    for (size_t j = 0; j < indices_.size(); ++j) {
      values[j] = residual[indices_[j]];
      residual[indices_[j]] = 0.0f;  // sent
    }
    Round round;
    round.bytes = indices_.size() * sizeof(float);
    return round;
  }

  absl::StatusOr<std::optional<Round>> DoNext(
      int /*round*/, absl::Span<std::byte> scratch,
      absl::Span<const absl::Span<const std::byte>> /*gathered*/, absl::Span<float> out,
      float scale) override {
    ScatterScaled(indices_, reinterpret_cast<const float*>(scratch.data()), out, scale);
    return std::optional<Round>();
  }

  const double ratio_;
  const bool feedback_;
  const size_t k_;
  std::vector<uint32_t> indices_;  // this step's
};

}  // namespace

void ScatterScaled(absl::Span<const uint32_t> indices, const float* values,
                   absl::Span<float> out, float scale) {
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < indices.size(); ++j) out[indices[j]] = values[j] * scale;
}

absl::StatusOr<std::unique_ptr<Codec>> MakeRandomK(KeyValueParams& settings,
                                                   const CodecContext& context, size_t count,
                                                   bool feedback) {
  double ratio = 0.01;
  RETURN_IF_ERROR(settings.Real("ratio", 1e-9, 1.0, &ratio));
  RETURN_IF_ERROR(settings.Done());
  if (count == 0) return std::unique_ptr<Codec>();
  return std::unique_ptr<Codec>(new RandomKCodec(context, count, feedback, ratio));
}

}  // namespace rdmaflow::compression::internal
