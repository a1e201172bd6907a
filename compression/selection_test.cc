// File: selection_test.cc
#include "compression/selection.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace rdmaflow::compression {
namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(TopKIndicesTest, PicksExactlyTheLargestMagnitudesInIndexOrder) {
  const std::vector<float> v = {0.5f, -3.0f, 1.0f, 2.0f, -0.1f, 3.0f, 0.0f};
  EXPECT_EQ(TopKIndices(v, 3), (std::vector<uint32_t>{1, 3, 5}));
  // |-3| == |3|: the lower index wins a tie at the cut.
  EXPECT_EQ(TopKIndices(v, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(TopKIndices(v, 100).size(), v.size());
  EXPECT_TRUE(TopKIndices(v, 0).empty());
}

TEST(TopKIndicesTest, AgreesWithASortOnRandomData) {
  const std::vector<float> v = Gaussian(10000, 7);
  std::vector<uint32_t> order(v.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::fabs(v[a]) > std::fabs(v[b]);
  });
  order.resize(100);
  std::sort(order.begin(), order.end());
  EXPECT_EQ(TopKIndices(v, 100), order);
}

TEST(TopKIndicesTest, ANanIsChosenFirstAndDoesNotBreakTheSelection) {
  std::vector<float> v = Gaussian(1000, 3);
  v[17] = NAN;
  const std::vector<uint32_t> chosen = TopKIndices(v, 5);
  ASSERT_EQ(chosen.size(), 5u);
  EXPECT_TRUE(std::binary_search(chosen.begin(), chosen.end(), 17u));
}

TEST(SampledTopKIndicesTest, TakesEverythingAboveItsThresholdWithinTheCap) {
  const std::vector<float> v = Gaussian(100000, 11);
  const size_t k = 1000;
  const std::vector<uint32_t> chosen = SampledTopKIndices(v, k, 10000, 2 * k, 5);
  ASSERT_GE(chosen.size(), k / 2);
  ASSERT_LE(chosen.size(), 2 * k);
  EXPECT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
  // Whatever it took is at least as large as whatever it left.
  float smallest_taken = INFINITY;
  for (uint32_t i : chosen) smallest_taken = std::min(smallest_taken, std::fabs(v[i]));
  std::set<uint32_t> taken(chosen.begin(), chosen.end());
  for (uint32_t i = 0; i < v.size(); ++i) {
    if (!taken.count(i)) ASSERT_LE(std::fabs(v[i]), smallest_taken) << i;
  }
}

TEST(SampledTopKIndicesTest, KeepsTheLargestWhenTooManyPass) {
  std::vector<float> v(5000, 1.0f);  // every sample sets the threshold at 1
  v[42] = 2.0f;
  const std::vector<uint32_t> chosen = SampledTopKIndices(v, 10, 1000, 20, 1);
  ASSERT_EQ(chosen.size(), 20u);
  EXPECT_TRUE(std::binary_search(chosen.begin(), chosen.end(), 42u));
}

TEST(DrawIndicesTest, DrawsKDistinctIncreasingIndicesTheSameFromTheSameSeed) {
  const std::vector<uint32_t> a = DrawIndices(1000, 50, 99);
  ASSERT_EQ(a.size(), 50u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end());
  EXPECT_LT(a.back(), 1000u);
  EXPECT_EQ(DrawIndices(1000, 50, 99), a);
  EXPECT_NE(DrawIndices(1000, 50, 100), a);
  EXPECT_EQ(DrawIndices(10, 10, 1).size(), 10u);
}

TEST(DrawIndicesTest, CoversTheRangeEvenly) {
  std::vector<int> hits(10, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    for (uint32_t i : DrawIndices(10, 3, seed)) ++hits[i];
  }
  // 600 expected per index; a bias of 10% would be a broken sampler.
  for (int h : hits) EXPECT_NEAR(h, 600, 60);
}

TEST(SketchHashTest, BucketsFallInRangeAndSignsAreBalanced) {
  SketchHash hash{12345, 97};
  int plus = 0;
  std::vector<int> per_bucket(97, 0);
  for (uint32_t i = 0; i < 97000; ++i) {
    const uint64_t h = hash.Hash(2, i);
    ASSERT_LT(hash.Bucket(h), 97u);
    ++per_bucket[hash.Bucket(h)];
    plus += SketchHash::Sign(h) > 0;
  }
  EXPECT_NEAR(plus, 48500, 1000);
  for (int n : per_bucket) EXPECT_NEAR(n, 1000, 150);
  EXPECT_NE(hash.Hash(0, 5), hash.Hash(1, 5));
}

}  // namespace
}  // namespace rdmaflow::compression
