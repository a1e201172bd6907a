// File: selection.cc
#include "compression/selection.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace rdmaflow::compression {
namespace {

// |v|, with NaN above everything (a NaN gradient is sent, not hidden, and
// the orderings below stay strict weak orderings).
float Magnitude(float v) { return std::isnan(v) ? INFINITY : std::fabs(v); }

// Larger magnitude first; of equal magnitudes, the lower index.
struct ByMagnitude {
  const float* values;
  bool operator()(uint32_t a, uint32_t b) const {
    const float ma = Magnitude(values[a]);
    const float mb = Magnitude(values[b]);
    return ma != mb ? ma > mb : a < b;
  }
};

// The `k` first of `candidates` by magnitude, in increasing index order.
std::vector<uint32_t> KeepLargest(absl::Span<const float> values,
                                  std::vector<uint32_t> candidates, size_t k) {
  if (candidates.size() > k) {
    std::nth_element(candidates.begin(), candidates.begin() + k, candidates.end(),
                     ByMagnitude{values.data()});
    candidates.resize(k);
  }
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

}  // namespace

uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t StreamSeed(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t member) {
  return Mix64(Mix64(Mix64(seed ^ purpose) ^ step) ^ member);
}

std::vector<uint32_t> TopKIndices(absl::Span<const float> values, size_t k) {
  const size_t n = values.size();
  k = std::min(k, n);
  if (k == 0) return {};
  if (n >= 4096 && k <= n / 8) {
    // A bound first, from an evenly strided sample: the magnitude about 2k/n
    // of the way from its top. If at least k elements reach it, the k-th
    // largest does too, so every element of the exact answer (ties at the
    // cut included) is among them: select there instead of among all n.
    const size_t sample = std::clamp<size_t>(64 * n / k, 1024, n);
    const size_t stride = n / sample;
    std::vector<float> drawn;
    drawn.reserve(sample);
    for (size_t i = 0; i < n && drawn.size() < sample; i += stride) {
      drawn.push_back(Magnitude(values[i]));
    }
    const size_t above = std::min(drawn.size() - 1, 2 * k * drawn.size() / n);
    std::nth_element(drawn.begin(), drawn.begin() + above, drawn.end(), std::greater<float>());
    const float bound = drawn[above];
    std::vector<uint32_t> candidates;
    candidates.reserve(4 * k);
    for (size_t i = 0; i < n; ++i) {
      if (Magnitude(values[i]) >= bound) candidates.push_back(static_cast<uint32_t>(i));
    }
    if (candidates.size() >= k) return KeepLargest(values, std::move(candidates), k);
  }
  std::vector<uint32_t> all(values.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  return KeepLargest(values, std::move(all), k);
}

std::vector<uint32_t> SampledTopKIndices(absl::Span<const float> values, size_t k,
                                         size_t sample, size_t cap, uint64_t rng_seed) {
  const size_t n = values.size();
  k = std::min(k, n);
  cap = std::max<size_t>(std::min(cap, n), 1);
  if (k == 0) return {};
  if (sample >= n || k >= n) return TopKIndices(values, std::min(k, cap));
  SplitMix64 rng(rng_seed);
  std::vector<float> drawn(std::max<size_t>(sample, 1));
  for (float& m : drawn) m = Magnitude(values[rng.Below(n)]);
  // The sample's magnitude with a share k/n of the sample at or above it.
  const size_t above = std::min(
      drawn.size() - 1,
      static_cast<size_t>(static_cast<double>(k) / static_cast<double>(n) *
                          static_cast<double>(drawn.size())));
  std::nth_element(drawn.begin(), drawn.begin() + above, drawn.end(), std::greater<float>());
  const float threshold = drawn[above];
  std::vector<uint32_t> chosen;
  chosen.reserve(std::min(cap, 2 * k + 16));
  for (size_t i = 0; i < n; ++i) {
    if (Magnitude(values[i]) >= threshold) chosen.push_back(static_cast<uint32_t>(i));
  }
  if (chosen.empty()) return TopKIndices(values, 1);
  return KeepLargest(values, std::move(chosen), cap);
}

std::vector<uint32_t> DrawIndices(size_t n, size_t k, uint64_t rng_seed) {
  k = std::min(k, n);
  std::vector<uint32_t> chosen;
  chosen.reserve(k);
  SplitMix64 rng(rng_seed);
  for (size_t i = 0; i < n && chosen.size() < k; ++i) {
    // Take i with probability (still needed) / (still left).
    if (rng.Below(n - i) < k - chosen.size()) chosen.push_back(static_cast<uint32_t>(i));
  }
  return chosen;
}

}  // namespace rdmaflow::compression
