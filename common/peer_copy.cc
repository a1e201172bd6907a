// File: peer_copy.cc
#include "common/peer_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace rdmaflow {
namespace {

thread_local uint64_t streamed_copies = 0;

#if defined(__x86_64__)
// Streams `bytes` (a multiple of 64) from `from` to `to` (16-byte aligned),
// a cache line per round: four unaligned loads, four streaming stores.
void StreamLines(std::byte* to, const std::byte* from, size_t bytes) {
  auto* out = reinterpret_cast<__m128i*>(to);
  const auto* in = reinterpret_cast<const __m128i*>(from);
  for (size_t i = 0; i < bytes / 16; i += 4) {
    const __m128i a = _mm_loadu_si128(in + i);
    const __m128i b = _mm_loadu_si128(in + i + 1);
    const __m128i c = _mm_loadu_si128(in + i + 2);
    const __m128i d = _mm_loadu_si128(in + i + 3);
    _mm_stream_si128(out + i, a);
    _mm_stream_si128(out + i + 1, b);
    _mm_stream_si128(out + i + 2, c);
    _mm_stream_si128(out + i + 3, d);
  }
}
#endif

}  // namespace

uint64_t StreamedCopiesOnThisThread() { return streamed_copies; }

bool StreamingCopyAvailable() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

void StreamToPeer(void* to, const void* from, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= 128) {  // else a plain copy: no whole line past the head
    auto* out = static_cast<std::byte*>(to);
    const auto* in = static_cast<const std::byte*>(from);
    // A plain copy up to the first 64-byte boundary of the destination, so
    // that every streamed line is a whole one; then the lines; then the
    // rest plainly.
    const size_t head =
        (64 - reinterpret_cast<uintptr_t>(out) % 64) % 64;
    std::memcpy(out, in, head);
    const size_t lines = (bytes - head) / 64 * 64;
    StreamLines(out + head, in + head, lines);
    std::memcpy(out + head + lines, in + head + lines, bytes - head - lines);
    // Streaming stores are weakly ordered: the fence makes them visible
    // before any later store (the caller's flag).
    _mm_sfence();
    ++streamed_copies;
    return;
  }
#endif
  std::memcpy(to, from, bytes);
}

}  // namespace rdmaflow
