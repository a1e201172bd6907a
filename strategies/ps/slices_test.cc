// Slices: every element of a shard in exactly one slice, each slice naming
// the parameters it overlaps, and the push order backward's.
#include "strategies/ps/slices.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::strategies::ps {
namespace {

using ::testing::ElementsAre;

Shard ThreeParameters() {
  // Parameters 0 (10 elements), 2 (25) and 5 (5), in model order.
  Shard shard;
  shard.elements = 40;
  shard.entries = {{0, 0, 10}, {2, 10, 25}, {5, 35, 5}};
  return shard;
}

TEST(SlicesTest, CutsTheShardIntoRangesThatCoverItOnce) {
  const std::vector<Slice> slices = SliceShard(ThreeParameters(), 16);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].offset, 0);
  EXPECT_EQ(slices[0].elements, 16);
  EXPECT_THAT(slices[0].parameters, ElementsAre(0, 2));  // 0..9 and 10..15
  EXPECT_EQ(slices[1].offset, 16);
  EXPECT_EQ(slices[1].elements, 16);
  EXPECT_THAT(slices[1].parameters, ElementsAre(2));  // inside parameter 2
  EXPECT_EQ(slices[2].offset, 32);
  EXPECT_EQ(slices[2].elements, 8);  // the last is shorter
  EXPECT_THAT(slices[2].parameters, ElementsAre(2, 5));
}

TEST(SlicesTest, AWholeShardIsOneSlice) {
  for (int64_t size : {int64_t{0}, int64_t{40}, int64_t{1} << 40}) {
    const std::vector<Slice> slices = SliceShard(ThreeParameters(), size);
    ASSERT_EQ(slices.size(), 1u) << size;
    EXPECT_EQ(slices[0].elements, 40);
    EXPECT_THAT(slices[0].parameters, ElementsAre(0, 2, 5));
  }
}

TEST(SlicesTest, AutoSlicesAre256KiBUntilAShardWouldNeedMoreThanTheMostSlices) {
  // Small and mid-sized shards: 256 KiB (a 256 MiB shard is exactly 1024).
  for (int64_t shard : {int64_t{0}, int64_t{1}, int64_t{17} << 20, int64_t{256} << 20}) {
    EXPECT_EQ(AutoSliceBytes(shard), 256 << 10) << shard;
  }
  // Beyond, the fewest whole elements that keep to 1024 slices.
  EXPECT_EQ(AutoSliceBytes((int64_t{256} << 20) + 4), (256 << 10) + 4);
  EXPECT_EQ(AutoSliceBytes(int64_t{1} << 30), 1 << 20);
  for (int64_t shard : {(int64_t{256} << 20) + 1, (int64_t{1} << 30) + 3,
                        int64_t{3'000'000'007}, (int64_t{1} << 40) + 12}) {
    const int64_t bytes = AutoSliceBytes(shard);
    EXPECT_EQ(bytes % 4, 0) << shard;
    const int64_t elements = bytes / 4;
    const int64_t shard_elements = (shard + 3) / 4;
    EXPECT_LE((shard_elements + elements - 1) / elements, kMaxSlices) << shard;
    // And no smaller size would do.
    EXPECT_GT((shard_elements + elements - 2) / (elements - 1), kMaxSlices) << shard;
  }
  // The largest shard a job could declare does not overflow.
  EXPECT_GT(AutoSliceBytes(std::numeric_limits<int64_t>::max()), 0);
}

TEST(SlicesTest, PushOrderFollowsTheLastGradientEachSliceWaitsFor) {
  // Two servers; backward completes parameter 5 first, then 2, then 0.
  std::vector<std::vector<Slice>> slices = {SliceShard(ThreeParameters(), 16),
                                            SliceShard(ThreeParameters(), 0)};
  const std::vector<int> ready_rank = {2, -1, 1, -1, -1, 0};
  std::vector<std::pair<int, int>> order;
  for (const SliceRef& ref : PushOrder(slices, ready_rank)) {
    order.emplace_back(ref.server, ref.slice);
  }
  // Slices 1 and 2 of server 0 wait for parameter 2 (rank 1); slice 0 of
  // server 0 and server 1's only slice for parameter 0 (rank 2).
  EXPECT_THAT(order, ElementsAre(std::pair(0, 1), std::pair(0, 2), std::pair(0, 0),
                                 std::pair(1, 0)));
}

}  // namespace
}  // namespace rdmaflow::strategies::ps
