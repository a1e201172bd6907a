// File: buckets_test.cc
#include "collectives/buckets.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::StatusIs;

TEST(LayOutTest, AlignsEachTensor) {
  ASSERT_OK_AND_ASSIGN(FusedLayout layout, LayOut({4, 100, 64, 1}, 64));
  EXPECT_EQ(layout.offsets, (std::vector<size_t>{0, 64, 192, 256}));
  EXPECT_EQ(layout.total_bytes, 320u);
  EXPECT_THAT(LayOut({4}, 48).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MakeBucketsTest, GroupsSmallTensorsAndIsolatesLargeOnes) {
  const std::vector<size_t> bytes = {100, 100, 5000, 8, 8, 8};
  ASSERT_OK_AND_ASSIGN(FusedLayout layout, LayOut(bytes, 64));
  ASSERT_OK_AND_ASSIGN(std::vector<Bucket> buckets, MakeBuckets(bytes, layout, 1024));
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first, 0u);
  EXPECT_EQ(buckets[0].end, 2u);
  EXPECT_EQ(buckets[1].first, 2u);
  EXPECT_EQ(buckets[1].end, 3u);
  EXPECT_EQ(buckets[1].bytes, 5000u);
  EXPECT_EQ(buckets[2].first, 3u);
  EXPECT_EQ(buckets[2].end, 6u);
  // Every tensor in exactly one bucket, each inside its bucket's bytes.
  size_t next = 0;
  for (const Bucket& b : buckets) {
    EXPECT_EQ(b.first, next);
    for (size_t i = b.first; i < b.end; ++i) {
      EXPECT_GE(layout.offsets[i], b.offset);
      EXPECT_LE(layout.offsets[i] + bytes[i], b.offset + b.bytes);
    }
    next = b.end;
  }
  EXPECT_EQ(next, bytes.size());
}

TEST(MakeBucketsTest, ZeroMeansOneBucket) {
  const std::vector<size_t> bytes = {100, 5000, 8};
  ASSERT_OK_AND_ASSIGN(FusedLayout layout, LayOut(bytes, 64));
  ASSERT_OK_AND_ASSIGN(std::vector<Bucket> buckets, MakeBuckets(bytes, layout, 0));
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].bytes, layout.offsets[2] + 8);
  EXPECT_THAT(MakeBuckets({1, 2}, layout, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::collectives
