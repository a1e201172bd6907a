// File: sparse_message_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for the sparse codecs' peer-written message: the input is
// a message as a peer (a worker's push, a member's all-gathered message)
// would have written it, decoded exactly and as a padded slot (as the top-k
// codec decodes a push in its receive slot). The output tensor has exactly
// its size, so
// an index the checks wrongly accept is an out-of-bounds write
// AddressSanitizer reports. Built by tools/fuzz.sh with --config=fuzz;
// without it, a no-op binary.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "compression/sparse_message.h"

namespace {

constexpr size_t kElements = 64;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdmaflow::compression;  // NOLINT: a fuzz entry point
  const absl::Span<const std::byte> message(reinterpret_cast<const std::byte*>(data), size);
  auto out = std::make_unique<float[]>(kElements);
  const absl::Span<float> tensor(out.get(), kElements);
  // Step 0, at most 16 pairs; both ways a message fills its span.
  AddSparseMessage(message, 0, 16, 1, tensor, 1.0f).IgnoreError();
  AddSparseMessage(message, 0, 16, 1, tensor, 1.0f, SparseFit::kPadded).IgnoreError();
  return 0;
}
