// File: shared_tensor_allocator_test.cc
#include "torch_backend/shared_tensor_allocator.h"

#include <sys/resource.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "collectives/shared_segments.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::torch_backend {
namespace {

using collectives::SharedSegments;

bool InSegment(const at::Tensor& tensor) {
  return SharedSegments::Process()
      .Find(static_cast<const std::byte*>(tensor.data_ptr()), tensor.nbytes())
      .has_value();
}

TEST(SharedTensorAllocatorTest, LargeTensorsLieInSegmentsSmallOnesDoNot) {
  at::Tensor before = at::ones({1 << 18}, at::kFloat);  // 1 MiB, allocated before
  ASSERT_OK(InstallSharedTensorAllocator(size_t{64} << 10));
  EXPECT_TRUE(SharedTensorAllocatorInstalled());
  EXPECT_FALSE(InSegment(before));
  const int64_t live = SharedSegments::Process().stats().live_bytes;
  {
    at::Tensor large = at::arange(1 << 18, at::kFloat);
    at::Tensor small = at::ones({100}, at::kFloat);
    EXPECT_TRUE(InSegment(large));
    EXPECT_FALSE(InSegment(small));
    EXPECT_EQ(large[12345].item<float>(), 12345.0f);
    EXPECT_EQ(SharedSegments::Process().stats().live_bytes, live + (int64_t{1} << 20));
    // Views and results of ops: their storages are allocations too.
    at::Tensor sum = large + large;
    EXPECT_TRUE(InSegment(sum));
    EXPECT_TRUE(InSegment(large.slice(0, 1000, 2000)));
  }
  // Freed into the pool; the next tensor of that size reuses it.
  EXPECT_EQ(SharedSegments::Process().stats().live_bytes, live);
  const int64_t reused = SharedSegments::Process().stats().reused;
  at::Tensor again = at::zeros({1 << 18}, at::kFloat);
  EXPECT_TRUE(InSegment(again));
  EXPECT_GT(SharedSegments::Process().stats().reused, reused);
  EXPECT_EQ(again.sum().item<float>(), 0.0f);  // zeros, though the pool's bytes were not
}

TEST(SharedTensorAllocatorTest, TheRawInterfaceAndThresholdChangesWork) {
  ASSERT_OK(InstallSharedTensorAllocator(size_t{64} << 10));
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* large = allocator->raw_allocate(size_t{1} << 20);
  void* small = allocator->raw_allocate(64);
  ASSERT_NE(large, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(SharedSegments::Process().Find(static_cast<std::byte*>(large), 1).has_value());
  EXPECT_FALSE(SharedSegments::Process().Find(static_cast<std::byte*>(small), 1).has_value());
  allocator->raw_deallocate(large);
  allocator->raw_deallocate(small);
  ASSERT_OK(InstallSharedTensorAllocator(size_t{4} << 20));
  at::Tensor below = at::ones({1 << 18}, at::kFloat);  // 1 MiB: private now
  EXPECT_FALSE(InSegment(below));
  EXPECT_THAT(InstallSharedTensorAllocator(0),
              rdmaflow::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

// Where no segment can be made (here: no descriptor left), a tensor goes
// to private memory and works as any other.
TEST(SharedTensorAllocatorTest, ATensorWithoutASegmentGoesToPrivateMemory) {
  ASSERT_OK(InstallSharedTensorAllocator(size_t{64} << 10));
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlimit before = files;
  const int highest = dup(0);  // the lowest free descriptor
  ASSERT_GE(highest, 0);
  close(highest);
  files.rlim_cur = static_cast<rlim_t>(highest);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  // 3 MiB: no pooled segment of the earlier tests fits it.
  at::Tensor tensor = at::full({3 << 18}, 2.0f, at::kFloat);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  EXPECT_FALSE(InSegment(tensor));
  EXPECT_EQ(tensor.sum().item<float>(), 2.0f * (3 << 18));
  // With descriptors again, the next one is a segment.
  EXPECT_TRUE(InSegment(at::full({3 << 18}, 2.0f, at::kFloat)));
}

}  // namespace
}  // namespace rdmaflow::torch_backend
