// File: selection.h
// -----------------------------------------------------------------------------
// The index choices the codecs share: the k largest magnitudes (exactly, or
// above a threshold estimated from a sample), k indices drawn from a seed
// every member shares, and the hash functions of a Count-Sketch. Every
// choice is deterministic: ties are broken by index, and random draws come
// from a seeded SplitMix64, so members given the same inputs choose alike.
#ifndef RDMAFLOW_COMPRESSION_SELECTION_H_
#define RDMAFLOW_COMPRESSION_SELECTION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace rdmaflow::compression {

// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014): a 64-bit mix, and the
// generator built on it.
uint64_t Mix64(uint64_t x);
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n), n > 0 (the bias of a 64-bit modulo is below 2^-40
  // for the n a tensor has).
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

// A seed for one purpose of one step (and one member, for choices that
// must differ between members).
uint64_t StreamSeed(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t member = 0);

// The min(k, size) indices of the largest |values[i]| in increasing order;
// of equal magnitudes the lower index wins.
std::vector<uint32_t> TopKIndices(absl::Span<const float> values, size_t k);

// About k indices of large |values[i]|, in increasing order: those at or
// above the magnitude a sample of `sample` values (drawn from `rng_seed`)
// puts k/size of the way from its top; at most `cap` of them (the largest,
// as TopKIndices picks them, when more pass), and at least one when k > 0
// and values is not empty.
std::vector<uint32_t> SampledTopKIndices(absl::Span<const float> values, size_t k,
                                         size_t sample, size_t cap, uint64_t rng_seed);

// k distinct indices of [0, n), increasing, every k-subset equally likely
// (selection sampling, Knuth's Algorithm S), from `rng_seed`.
std::vector<uint32_t> DrawIndices(size_t n, size_t k, uint64_t rng_seed);

// Count-Sketch hashes: row `row`'s bucket of index i in [0, cols), and its
// sign (+1 or -1), from the shared seed.
// One 64-bit mix gives both: the bucket from its high 32 bits (multiply-
// shift, no division), the sign from its lowest bit.
struct SketchHash {
  uint64_t seed = 0;
  size_t cols = 1;
  uint64_t Hash(int row, uint32_t i) const {
    return Mix64(seed ^ (static_cast<uint64_t>(row) << 40) ^ i);
  }
  uint32_t Bucket(uint64_t hash) const {
    return static_cast<uint32_t>(((hash >> 32) * static_cast<uint64_t>(cols)) >> 32);
  }
  static float Sign(uint64_t hash) { return (hash & 1) != 0 ? 1.0f : -1.0f; }
};

}  // namespace rdmaflow::compression

#endif  // RDMAFLOW_COMPRESSION_SELECTION_H_
