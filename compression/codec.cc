// File: codec.cc
#include "compression/codec.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "compression/internal/codecs.h"

namespace rdmaflow::compression {
namespace {

struct Known {
  const char* name;
  internal::MakeCodecFn make;
};

constexpr Known kCodecs[] = {
    {"topk", &internal::MakeTopK},
    {"randomk", &internal::MakeRandomK},
    {"int8", &internal::MakeInt8},
    {"sketch", &internal::MakeSketch},
};

// Splits "NAME[:settings]", finds the codec and reads `feedback`; then the
// codec's maker reads the rest (count 0: settings only).
absl::StatusOr<std::unique_ptr<Codec>> Make(absl::string_view spec, const CodecContext& context,
                                            size_t count) {
  const size_t colon = spec.find(':');
  const absl::string_view name = spec.substr(0, colon);
  const absl::string_view text =
      colon == absl::string_view::npos ? absl::string_view() : spec.substr(colon + 1);
  const Known* known = nullptr;
  for (const Known& k : kCodecs) {
    if (name == k.name) known = &k;
  }
  if (known == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown gradient codec '", name, "' (from '", spec, "'); known: ",
        absl::StrJoin(CodecNames(), ", "), " (or none)"));
  }
  ASSIGN_OR_RETURN(auto map, ParseKeyValues(text, absl::StrCat(name, " setting")));
  KeyValueParams settings(std::string(name), std::move(map));
  int feedback = 1;
  RETURN_IF_ERROR(settings.Int("feedback", 0, &feedback));
  if (feedback > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " feedback must be 0 or 1, got ", feedback));
  }
  return known->make(settings, context, count, feedback == 1);
}

}  // namespace

std::string ExchangeName(Exchange exchange) {
  switch (exchange) {
    case Exchange::kAllReduceSum:
      return "all-reduce-sum";
    case Exchange::kAllReduceMax:
      return "all-reduce-max";
    case Exchange::kAllGather:
      return "all-gather";
  }
  return "unknown";
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> names;
  for (const Known& k : kCodecs) names.push_back(k.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view spec,
                                                   const CodecContext& context,
                                                   size_t count) {
  if (context.world < 1 || context.rank < 0 || context.rank >= context.world) {
    return absl::InvalidArgumentError(absl::StrCat("gradient codec '", spec, "': member ",
                                                   context.rank, " of ", context.world));
  }
  if (count == 0 || count > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient codec '", spec, "': a tensor of ", count,
        " elements (codecs take 1 to 2^32-1 elements; compress larger ones in buckets)"));
  }
  return Make(spec, context, count);
}

absl::Status ValidateCodecSpec(absl::string_view spec) {
  return Make(spec, CodecContext{}, 0).status();
}

Codec::Codec(const CodecContext& context, size_t count, bool feedback)
    : context_(context), count_(count), feedback_(feedback), residual_(count, 0.0f) {}

absl::StatusOr<Round> Codec::Begin(absl::Span<const float> gradient, uint64_t step,
                                   absl::Span<std::byte> scratch) {
  if (round_ >= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        spec(), ": Begin() of step ", step, " while step ", step_,
        " is under way (call Next() until it returns no round)"));
  }
  if (gradient.size() != count_ || scratch.size() < scratch_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec(), ": a gradient of ", gradient.size(), " elements and ", scratch.size(),
        " bytes of scratch; the codec was made for ", count_, " elements and needs ",
        scratch_bytes(), " bytes"));
  }
  if (feedback_) {
    for (size_t i = 0; i < count_; ++i) residual_[i] += gradient[i];
  } else {
    std::copy(gradient.begin(), gradient.end(), residual_.begin());
  }
  step_ = step;
  ASSIGN_OR_RETURN(Round round, DoBegin(step, scratch));
  round_ = 0;
  last_exchange_ = round.exchange;
  return round;
}

absl::StatusOr<std::optional<Round>> Codec::Next(
    absl::Span<std::byte> scratch, absl::Span<const absl::Span<const std::byte>> gathered,
    absl::Span<float> out, float scale) {
  if (round_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(spec(), ": Next() outside a step (call Begin() first)"));
  }
  if (out.size() != count_ || scratch.size() < scratch_bytes() ||
      (last_exchange_ == Exchange::kAllGather &&
       gathered.size() != static_cast<size_t>(context_.world))) {
    round_ = -1;
    return absl::InvalidArgumentError(absl::StrCat(
        spec(), ": Next() with ", out.size(), " output elements (", count_, " expected), ",
        scratch.size(), " bytes of scratch (", scratch_bytes(), " needed) and ",
        gathered.size(), " gathered messages (one per member after an all-gather: ",
        context_.world, ")"));
  }
  absl::StatusOr<std::optional<Round>> next = DoNext(round_, scratch, gathered, out, scale);
  if (!next.ok() || !next->has_value()) {
    round_ = -1;
  } else {
    ++round_;
    last_exchange_ = (*next)->exchange;
  }
  return next;
}

absl::StatusOr<size_t> Codec::EncodeMessage(absl::Span<const float> gradient, uint64_t step,
                                            absl::Span<std::byte> out) {
  if (max_message_bytes() == 0) {
    return absl::UnimplementedError(absl::StrCat(
        spec(), " needs a collective among the members; a point-to-point push takes topk"));
  }
  ASSIGN_OR_RETURN(Round round, Begin(gradient, step, out));
  round_ = -1;  // the message is all there is to the step
  if (round.exchange != Exchange::kAllGather || round.offset != 0) {
    return absl::InternalError(absl::StrCat(spec(), ": a message codec began with ",
                                            ExchangeName(round.exchange), " at ",
                                            round.offset));
  }
  return round.bytes;
}

absl::Status Codec::AddMessage(absl::Span<const std::byte> /*message*/, uint64_t /*step*/,
                               int /*member*/, absl::Span<float> /*out*/,
                               float /*scale*/) const {
  return absl::UnimplementedError(absl::StrCat(
      spec(), " needs a collective among the members; a point-to-point push takes topk"));
}

}  // namespace rdmaflow::compression
