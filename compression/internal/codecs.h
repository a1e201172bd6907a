// File: internal/codecs.h
// -----------------------------------------------------------------------------
// The codecs' makers, for CreateCodec() (codec_factory.cc) only. Each reads
// its settings from `settings` (and calls Done()), checks them, and with
// count 0 stops there (ValidateCodecSpec()) returning null; otherwise it
// checks the count and the members against them and makes the codec.
#ifndef RDMAFLOW_COMPRESSION_INTERNAL_CODECS_H_
#define RDMAFLOW_COMPRESSION_INTERNAL_CODECS_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/key_value_params.h"
#include "compression/codec.h"

namespace rdmaflow::compression::internal {

using MakeCodecFn = absl::StatusOr<std::unique_ptr<Codec>> (*)(
    KeyValueParams& settings, const CodecContext& context, size_t count, bool feedback);

absl::StatusOr<std::unique_ptr<Codec>> MakeTopK(KeyValueParams& settings,
                                                const CodecContext& context, size_t count,
                                                bool feedback);
absl::StatusOr<std::unique_ptr<Codec>> MakeRandomK(KeyValueParams& settings,
                                                   const CodecContext& context, size_t count,
                                                   bool feedback);
absl::StatusOr<std::unique_ptr<Codec>> MakeInt8(KeyValueParams& settings,
                                                const CodecContext& context, size_t count,
                                                bool feedback);
absl::StatusOr<std::unique_ptr<Codec>> MakeSketch(KeyValueParams& settings,
                                                  const CodecContext& context, size_t count,
                                                  bool feedback);

// out = 0, then out[indices[j]] = scale * values[j]: what a codec that sent
// values at chosen indices decodes.
void ScatterScaled(absl::Span<const uint32_t> indices, const float* values,
                   absl::Span<float> out, float scale);

// Bytes rounded up to a multiple of 64 (where the next round's span starts).
inline size_t RoundUp64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// k = ratio * count rounded, at least 1 and at most count.
size_t RatioToK(double ratio, size_t count);

// Purposes of StreamSeed(): each random choice draws from its own stream.
inline constexpr uint64_t kTopKSample = 1;
inline constexpr uint64_t kRandomKIndices = 2;
inline constexpr uint64_t kInt8Rounding = 3;
inline constexpr uint64_t kSketchHashes = 4;

}  // namespace rdmaflow::compression::internal

#endif  // RDMAFLOW_COMPRESSION_INTERNAL_CODECS_H_
