// File: codec.h
// -----------------------------------------------------------------------------
// Gradient codecs: send fewer bytes than the gradient has, and keep what was
// not sent for later (error feedback), so that over the steps every part of
// every gradient is applied.
//
// A codec does not move bytes itself. It encodes into a scratch buffer (the
// exchange's registered memory, so the wire reads what the codec wrote) and
// names the collective it needs over it, a Round: an all-reduce (sum or
// max) of a span of the scratch, or an all-gather of a message of varying
// length. A driver runs the round (compressed_allreduce.h over rdma/ and the
// collectives; the DDP hook over any torch.distributed backend), then hands
// the result back; the codec decodes it or encodes the next round.
//
//   ASSIGN_OR_RETURN(auto codec, CreateCodec("topk:ratio=0.01", context, count));
//   ASSIGN_OR_RETURN(Round round, codec->Begin(gradient, step, scratch));
//   for (;;) {
//     ... exchange `round` over the members ...
//     ASSIGN_OR_RETURN(std::optional<Round> next,
//                      codec->Next(scratch, gathered, out, 1.0f / members));
//     if (!next.has_value()) break;  // `out` holds the decoded sum
//     round = *next;
//   }
//
// Error feedback: Begin() adds the gradient to the codec's residual; what a
// round sends is taken out of the residual when it is encoded. So, on each
// member, the sum of what it sent over the steps plus its residual equals
// the sum of its gradients (up to float rounding).
//
// Everything a peer contributed (gathered messages, reduced values) is
// untrusted: a message whose header, length or indices do not fit, or a
// reduced value no honest member could produce, is kDataLoss naming the
// member, and `out` is left unspecified.
#ifndef RDMAFLOW_COMPRESSION_CODEC_H_
#define RDMAFLOW_COMPRESSION_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/reduce.h"

namespace rdmaflow::compression {

// Who the codec runs on: its position among the members, how many there
// are, and a seed every member shares (random-k's indices and the sketch's
// hashes come from it, so no member sends them).
struct CodecContext {
  int rank = 0;
  int world = 1;
  uint64_t seed = 0;
};

enum class Exchange {
  kAllReduceSum,  // `bytes` at `offset`, elements of `type`, summed in place
  kAllReduceMax,  // the same, the elementwise maximum
  kAllGather,     // every member's message (this one's: `bytes` at `offset`)
};

std::string ExchangeName(Exchange exchange);

// One collective a codec asks for, over its scratch.
struct Round {
  Exchange exchange = Exchange::kAllReduceSum;
  collectives::DataType type = collectives::DataType::kFloat32;  // all-reduce
  size_t offset = 0;  // into the scratch; a multiple of 64
  size_t bytes = 0;   // all-reduce: the same on every member
};

// Thread-compatible. One codec per tensor (it holds that tensor's residual).
class Codec {
 public:
  virtual ~Codec() = default;

  // The codec and its settings, as CreateCodec() reads them back
  // ("topk:ratio=0.01,sampled=0,feedback=1").
  virtual std::string spec() const = 0;
  // Elements of the tensor it encodes.
  size_t count() const { return count_; }
  const CodecContext& context() const { return context_; }
  // Bytes of scratch the rounds use (the driver allocates at least this).
  virtual size_t scratch_bytes() const = 0;
  // The most bytes a member's all-gather message may have (0: the codec
  // never gathers). The driver receives each peer's message into this much.
  virtual size_t max_message_bytes() const { return 0; }
  // What the codec has not sent yet.
  absl::Span<const float> residual() const { return residual_; }
  // The elements the last step sent whole (taken out of the residual
  // entirely), increasing: the sparse codecs' chosen indices; empty for a
  // codec that sends every element in part (int8). A caller that keeps a
  // momentum of what it encodes resets these elements' (DGC's momentum
  // factor masking).
  virtual absl::Span<const uint32_t> sent() const { return {}; }

  // Starts a step: the residual takes in `gradient` (count() elements;
  // without error feedback it is replaced by it), and the first round is
  // encoded into `scratch` (at least scratch_bytes()). `step` must grow by
  // one from call to call on every member alike (random choices and
  // message stamps come from it). kInvalidArgument for wrong sizes;
  // kFailedPrecondition while a step is under way.
  absl::StatusOr<Round> Begin(absl::Span<const float> gradient, uint64_t step,
                              absl::Span<std::byte> scratch);

  // The round Begin() or the last Next() returned has been exchanged: an
  // all-reduce's result lies in `scratch` where the round said; for an
  // all-gather, gathered[r] is member r's message (this member's too).
  // Returns the next round, or nullopt once `out` (count() elements; it may
  // be the gradient Begin() read) holds the decoded sum over the members
  // times `scale`. kDataLoss for a member's message or value that does not
  // fit (the step is then over); kFailedPrecondition outside a step.
  absl::StatusOr<std::optional<Round>> Next(absl::Span<std::byte> scratch,
                                            absl::Span<const absl::Span<const std::byte>> gathered,
                                            absl::Span<float> out, float scale);

  // Point to point (a parameter server's push), for codecs whose one round
  // is an all-gather (top-k): the message this member would gather, which
  // its receiver decodes alone with AddMessage(). Encodes as Begin() does
  // (the residual takes in the gradient; what the message holds leaves it)
  // and ends the step there. Returns the message's bytes, written at the
  // start of `out` (at least scratch_bytes()). kUnimplemented for codecs
  // that need a collective among the members; Begin()'s errors.
  absl::StatusOr<size_t> EncodeMessage(absl::Span<const float> gradient, uint64_t step,
                                       absl::Span<std::byte> out);
  // Adds `scale` times the decoded `message` (from `member`, stamped
  // `step`; bytes after the message are padding and ignored) into `out`
  // (count() elements). kDataLoss naming the member for a message that does
  // not fit (`out` is untouched then); kUnimplemented as above.
  virtual absl::Status AddMessage(absl::Span<const std::byte> message, uint64_t step,
                                  int member, absl::Span<float> out, float scale) const;

 protected:
  Codec(const CodecContext& context, size_t count, bool feedback);

  // Encodes the first round from residual_ (which holds the new gradient).
  virtual absl::StatusOr<Round> DoBegin(uint64_t step, absl::Span<std::byte> scratch) = 0;
  // Round `round` (0 for the first) was exchanged.
  virtual absl::StatusOr<std::optional<Round>> DoNext(
      int round, absl::Span<std::byte> scratch,
      absl::Span<const absl::Span<const std::byte>> gathered, absl::Span<float> out,
      float scale) = 0;

  absl::Span<float> mutable_residual() { return absl::MakeSpan(residual_); }
  uint64_t step() const { return step_; }

 private:
  const CodecContext context_;
  const size_t count_;
  const bool feedback_;
  std::vector<float> residual_;
  uint64_t step_ = 0;
  int round_ = -1;  // -1: no step under way
  Exchange last_exchange_ = Exchange::kAllReduceSum;
};

// The codecs CreateCodec() knows: "none" is not one of them (no codec).
std::vector<std::string> CodecNames();

// A codec from its spec, "NAME" or "NAME:key=value,key=value":
//   topk:ratio=R[,sampled=0|1]         the k = ratio * count largest
//                                      magnitudes, as (index, value) pairs
//                                      (sampled: a threshold from a sample
//                                      instead of an exact selection)
//   randomk:ratio=R                    k values at indices every member draws
//                                      from the shared seed
//   int8[:bucket=N]                    stochastic 8-bit levels, one scale per
//                                      bucket of N elements (QSGD)
//   sketch[:rows=R,cols=C,k=K]         Count-Sketch of the residual,
//                                      all-reduced; the K heavy hitters it
//                                      finds, all-reduced exactly (gs-SGD);
//                                      K at most the tensor's elements
// and, for each, feedback=0|1 (error feedback, on by default).
// kInvalidArgument naming the codec and the setting for a bad spec (an
// unknown codec lists the known ones); for members or a count the codec
// cannot serve.
absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view spec,
                                                   const CodecContext& context,
                                                   size_t count);

// Whether `spec` parses (every setting in range); the count is not known
// yet. The same errors as CreateCodec()'s.
absl::Status ValidateCodecSpec(absl::string_view spec);

}  // namespace rdmaflow::compression

#endif  // RDMAFLOW_COMPRESSION_CODEC_H_
