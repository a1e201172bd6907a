#include "runtime/pool_allocator.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;

TEST(PoolAllocatorTest, AlignsAndReusesFreedRanges) {
  PoolAllocator pool(1024, 64);
  ASSERT_OK_AND_ASSIGN(size_t a, pool.Allocate(10));
  ASSERT_OK_AND_ASSIGN(size_t b, pool.Allocate(100));
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 64u);
  EXPECT_EQ(pool.used(), 64u + 128u);
  pool.Free(a);
  ASSERT_OK_AND_ASSIGN(size_t c, pool.Allocate(64));
  EXPECT_EQ(c, 0u);
  pool.Free(b);
  pool.Free(c);
  EXPECT_EQ(pool.used(), 0u);
  // Freed neighbours merged back into one range.
  ASSERT_OK_AND_ASSIGN(size_t all, pool.Allocate(1024));
  EXPECT_EQ(all, 0u);
}

TEST(PoolAllocatorTest, FullPoolSaysWhatIsFree) {
  PoolAllocator pool(256, 64);
  ASSERT_OK_AND_ASSIGN(size_t a, pool.Allocate(64));
  ASSERT_OK_AND_ASSIGN(size_t b, pool.Allocate(64));
  ASSERT_OK_AND_ASSIGN(size_t c, pool.Allocate(64));
  pool.Free(b);
  EXPECT_THAT(pool.Allocate(128),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("largest free range 64 B")));
  EXPECT_THAT(pool.Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
  (void)a;
  (void)c;
}

}  // namespace
}  // namespace rdmaflow::runtime
