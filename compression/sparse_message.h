// File: sparse_message.h
// -----------------------------------------------------------------------------
// The all-gathered message of the sparse codecs: (index, value) pairs of one
// member's tensor, as many as it chose this step.
//
//   bytes 0..3    magic "RFSP"
//   bytes 4..7    pairs (uint32)
//   bytes 8..15   step (uint64), so a message from another step is refused
//   then          pairs uint32 indices, strictly increasing
//   then          pairs float32 values
//
// A peer writes it: AddSparseMessage() copies the header and the indices
// once, checks the copy (lengths with overflow-safe arithmetic, indices
// against the tensor) and uses only the copy.
#ifndef RDMAFLOW_COMPRESSION_SPARSE_MESSAGE_H_
#define RDMAFLOW_COMPRESSION_SPARSE_MESSAGE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace rdmaflow::compression {

inline constexpr size_t kSparseHeaderBytes = 16;

// Bytes of a message of `pairs` pairs.
size_t SparseMessageBytes(size_t pairs);

// Writes the pairs (i, source[i]) for i in `indices` (increasing, each
// below source.size()) into `out` (at least SparseMessageBytes(indices.size())
// bytes); returns the message's bytes.
size_t WriteSparseMessage(uint64_t step, absl::Span<const uint32_t> indices,
                          absl::Span<const float> source, absl::Span<std::byte> out);

// How a message fills the span it is given: exactly (an all-gathered
// message, whose length travelled with it), or from the span's start with
// padding after it (a message in the fixed-size slot it was written into).
enum class SparseFit { kExact, kPadded };

// Checks `message` from member `member` (step `step`, at most `max_pairs`
// pairs, indices below out.size()), then adds scale * value at each index
// of `out`. kDataLoss naming the member and the field that does not fit;
// `out` is untouched then. `message` may be peer-writable memory that
// changes during the call: each of its bytes is read once.
absl::Status AddSparseMessage(absl::Span<const std::byte> message, uint64_t step,
                              size_t max_pairs, int member, absl::Span<float> out,
                              float scale, SparseFit fit = SparseFit::kExact);

}  // namespace rdmaflow::compression

#endif  // RDMAFLOW_COMPRESSION_SPARSE_MESSAGE_H_
