// File: size_balance_test.cc
#include "graph_analyzer/size_balance.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::testing::ElementsAre;

TEST(SizeBalanceTest, LargestFirstOntoTheLeastLoadedBin) {
  // 7 -> bin 0; 5 -> bin 1; 4 -> bin 1 (5 < 7); 3 -> bin 0 (7 < 9); 1 -> 0 or 1:
  // bin 0 holds 10, bin 1 holds 9 -> bin 1.
  EXPECT_THAT(BalanceBySize({3, 7, 1, 5, 4}, 2), ElementsAre(0, 0, 1, 1, 1));
  // Ties keep their order and go to the lower bin.
  EXPECT_THAT(BalanceBySize({2, 2, 2, 2}, 3), ElementsAre(0, 1, 2, 0));
  EXPECT_THAT(BalanceBySize({5, 1}, 1), ElementsAre(0, 0));
  EXPECT_TRUE(BalanceBySize({}, 4).empty());
}

TEST(SizeBalanceTest, HugeAndNegativeSizesNeitherOverflowNorCrash) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(BalanceBySize({max, max, max, -5}, 1), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(BalanceBySize({1, 2}, 0), ElementsAre(0, 0));
}

}  // namespace
}  // namespace rdmaflow::graph
