// File: topk_codec.cc
// -----------------------------------------------------------------------------
// top-k with error feedback: each member sends the k entries of its residual
// with the largest magnitudes as (index, value) pairs (sparse_message.h),
// all-gathered; every member adds up every member's pairs. The sampled
// variant takes the entries at or above a threshold estimated from a sample
// of the residual (one pass instead of a selection), so it sends about k of
// them (at most 2k); the message carries its length, so members agree on
// nothing before the all-gather.
#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"
#include "compression/selection.h"
#include "compression/sparse_message.h"

namespace rdmaflow::compression::internal {
namespace {

class TopKCodec final : public Codec {
 public:
  TopKCodec(const CodecContext& context, size_t count, bool feedback, double ratio,
            bool sampled)
      : Codec(context, count, feedback),
        ratio_(ratio),
        sampled_(sampled),
        feedback_(feedback),
        k_(RatioToK(ratio, count)),
        cap_(sampled ? std::min(count, 2 * k_) : k_),
        sample_(std::min(count, std::max<size_t>(1024, static_cast<size_t>(
                                                         std::ceil(100.0 / ratio))))) {}

  std::string spec() const override {
    return absl::StrCat("topk:ratio=", ratio_, ",sampled=", sampled_ ? 1 : 0,
                        ",feedback=", feedback_ ? 1 : 0);
  }
  size_t scratch_bytes() const override { return RoundUp64(SparseMessageBytes(cap_)); }
  size_t max_message_bytes() const override { return SparseMessageBytes(cap_); }
  absl::Span<const uint32_t> sent() const override { return chosen_; }

  absl::Status AddMessage(absl::Span<const std::byte> message, uint64_t step, int member,
                          absl::Span<float> out, float scale) const override {
    if (out.size() != count()) {
      return absl::InvalidArgumentError(absl::StrCat(spec(), ": AddMessage() into ", out.size(),
                                                     " elements; the codec has ", count()));
    }
    // A message padded to the slot it travelled in, which its sender may
    // still be writing: its header is read once, by AddSparseMessage.
    return AddSparseMessage(message, step, cap_, member, out, scale, SparseFit::kPadded);
  }

 private:
  absl::StatusOr<Round> DoBegin(uint64_t step, absl::Span<std::byte> scratch) override {
    absl::Span<float> residual = mutable_residual();
    chosen_ =
        sampled_ ? SampledTopKIndices(residual, k_, sample_, cap_,
                                      StreamSeed(context().seed, kTopKSample, step,
                                                 static_cast<uint64_t>(context().rank)))
                 : TopKIndices(residual, k_);
    Round round;
    round.exchange = Exchange::kAllGather;
    round.bytes = WriteSparseMessage(step, chosen_, residual, scratch);
    for (uint32_t i : chosen_) residual[i] = 0.0f;  // sent
    return round;
  }

  absl::StatusOr<std::optional<Round>> DoNext(
      int /*round*/, absl::Span<std::byte> /*scratch*/,
      absl::Span<const absl::Span<const std::byte>> gathered, absl::Span<float> out,
      float scale) override {
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t member = 0; member < gathered.size(); ++member) {
      RETURN_IF_ERROR(AddSparseMessage(gathered[member], step(), cap_,
                                       static_cast<int>(member), out, scale));
    }
    return std::optional<Round>();
  }

  const double ratio_;
  const bool sampled_;
  const bool feedback_;
  const size_t k_;
  const size_t cap_;     // pairs a message may have
  const size_t sample_;  // sampled: residual entries the threshold is read from
  std::vector<uint32_t> chosen_;  // this step's
};

}  // namespace

size_t RatioToK(double ratio, size_t count) {
  const double k = std::round(ratio * static_cast<double>(count));
  return std::clamp<size_t>(k < 1 ? 1 : static_cast<size_t>(k), 1, count);
}

absl::StatusOr<std::unique_ptr<Codec>> MakeTopK(KeyValueParams& settings,
                                                const CodecContext& context, size_t count,
                                                bool feedback) {
  double ratio = 0.01;
  int sampled = 0;
  RETURN_IF_ERROR(settings.Real("ratio", 1e-9, 1.0, &ratio));
  RETURN_IF_ERROR(settings.Int("sampled", 0, &sampled));
  RETURN_IF_ERROR(settings.Done());
  if (ratio <= 0 || sampled > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topk needs 0 < ratio <= 1 and sampled 0 or 1; got ratio ", ratio, ", sampled ",
        sampled));
  }
  if (count == 0) return std::unique_ptr<Codec>();
  return std::unique_ptr<Codec>(new TopKCodec(context, count, feedback, ratio, sampled == 1));
}

}  // namespace rdmaflow::compression::internal
