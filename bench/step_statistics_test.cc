#include "bench/step_statistics.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::bench {
namespace {

TEST(MedianOfBlockMeansTest, BimodalStepsCountAtTheirMean) {
  // A sender that runs 3 steps ahead, then waits: p50 1, mean 2.5.
  std::vector<double> rank;
  for (int i = 0; i < 40; ++i) rank.push_back(i % 4 == 3 ? 7 : 1);
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({rank}, 10), 2.5);
}

TEST(MedianOfBlockMeansTest, OnePreemptionDoesNotMoveIt) {
  std::vector<double> rank(100, 1.0);
  rank[57] = 1000;  // one 1 s stall: the mean is 10.99
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({rank}, 10), 1.0);
}

TEST(MedianOfBlockMeansTest, EachBlockTakesItsSlowestRank) {
  // Rank 0 slow in the first half, rank 1 in the second.
  std::vector<double> a(10, 1), b(10, 1);
  for (int i = 0; i < 5; ++i) a[i] = 3;
  for (int i = 5; i < 10; ++i) b[i] = 3;
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({a, b}, 2), 3);
  // Each rank's own median of means would be 2 (one slow, one fast block).
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({a}, 2), 2);
}

TEST(MedianOfBlockMeansTest, UnevenBlocksAndEdges) {
  // 7 steps in 3 blocks: [0,2) [2,4) [4,7).
  std::vector<double> rank = {1, 1, 2, 2, 3, 3, 3};
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({rank}, 3), 2);
  // More blocks than steps: one step a block, the median of the steps.
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({{5, 1, 3}}, 10), 3);
  EXPECT_EQ(MedianOfBlockMeans({}, 10), 0);
  EXPECT_EQ(MedianOfBlockMeans({{}}, 10), 0);
  EXPECT_EQ(MedianOfBlockMeans({{1, 2}}, 0), 0);
  // Ranks of different lengths: the steps every rank has.
  EXPECT_DOUBLE_EQ(MedianOfBlockMeans({{1, 1, 1}, {2, 2}}, 2), 2);
}

}  // namespace
}  // namespace rdmaflow::bench
