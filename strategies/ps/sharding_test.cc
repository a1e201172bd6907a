// Sharding: every parameter lands on exactly one server, shards are
// contiguous in model order, and the balance is the greedy rule's.
#include "strategies/ps/sharding.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::strategies::ps {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ShardingTest, BalancesBySizeAndCoversEveryParameterOnce) {
  // A VGG-like shape: one huge FC weight and many small tensors.
  const std::vector<int64_t> elements = {864, 32, 18432, 64, 6422528, 2048,
                                         20480, 10};
  ASSERT_OK_AND_ASSIGN(std::vector<Shard> shards, ShardParameters(elements, 3));
  ASSERT_EQ(shards.size(), 3u);
  std::vector<int> seen(elements.size(), 0);
  for (const Shard& shard : shards) {
    int64_t offset = 0;
    int last = -1;
    for (const ShardEntry& entry : shard.entries) {
      ++seen[entry.parameter];
      EXPECT_EQ(entry.offset, offset);
      EXPECT_EQ(entry.elements, elements[entry.parameter]);
      EXPECT_GT(entry.parameter, last);  // model order
      last = entry.parameter;
      offset += entry.elements;
    }
    EXPECT_EQ(shard.elements, offset);
    EXPECT_FALSE(shard.entries.empty());
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  // The huge tensor sits alone; the other two servers split the rest.
  int64_t small_max = 0, small_min = INT64_MAX;
  for (const Shard& shard : shards) {
    if (shard.elements >= 6422528) {
      EXPECT_EQ(shard.entries.size(), 1u);
    } else {
      small_max = std::max(small_max, shard.elements);
      small_min = std::min(small_min, shard.elements);
    }
  }
  EXPECT_LE(small_max - small_min, 20480);
}

TEST(ShardingTest, RejectsImpossibleLayouts) {
  EXPECT_THAT(ShardParameters({10, 20}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ShardParameters({10, 20}, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("use at most 2")));
  EXPECT_THAT(ShardParameters({10, 0}, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter 1 has 0 elements")));
}

TEST(ShardingTest, OntoPutsEachParameterWhereItIsTold) {
  ASSERT_OK_AND_ASSIGN(std::vector<Shard> shards,
                       ShardParametersOnto({10, 20, 30}, {1, 0, 1}, 2));
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0].elements, 20);
  ASSERT_EQ(shards[1].entries.size(), 2u);
  EXPECT_EQ(shards[1].entries[0].parameter, 0);
  EXPECT_EQ(shards[1].entries[1].parameter, 2);
  EXPECT_EQ(shards[1].entries[1].offset, 10);
  EXPECT_THAT(ShardParametersOnto({10, 20}, {0, 2}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server 2 of 2")));
  EXPECT_THAT(ShardParametersOnto({10, 20}, {1, 1}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server 0 of 2 holds no")));
  EXPECT_THAT(ShardParametersOnto({10, 20}, {0}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 owners for 2")));
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
