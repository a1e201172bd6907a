// RegisteredAllocator: tensors from the region, the fallback to ordinary
// memory, and MoveIn, which points an existing tensor's storage (and so its
// views) at a block of the region.
#include "ATen/ops/arange.h"
#include "ATen/ops/equal.h"
#include "ATen/ops/from_blob.h"
#include "ATen/ops/ones.h"
#include "runtime/torch/registered_allocator.h"

#include <cstddef>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime::torch {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

class RegisteredAllocatorTest : public ::testing::Test {
 protected:
  // An allocator over `bytes` of a local 64-byte aligned buffer (no
  // transport needed: Over takes any region).
  void MakeAllocator(size_t bytes) {
    memory_.reset(new Aligned[bytes / sizeof(Aligned) + 1]);
    parent_ = std::make_unique<rdma::MemoryRegion>(
        reinterpret_cast<std::byte*>(memory_.get()), bytes, rdma::RemoteRegion{}, nullptr);
    absl::StatusOr<std::unique_ptr<RegisteredAllocator>> allocator =
        RegisteredAllocator::Over(*parent_, 0, bytes);
    ASSERT_TRUE(allocator.ok()) << allocator.status();
    allocator_ = *std::move(allocator);
  }
  bool InRegion(const void* p) const {
    const auto* at = static_cast<const std::byte*>(p);
    const std::byte* data = allocator_->region().data();
    return at >= data && at < data + allocator_->region().size();
  }

  struct alignas(64) Aligned {
    std::byte bytes[64];
  };
  std::unique_ptr<Aligned[]> memory_;
  std::unique_ptr<rdma::MemoryRegion> parent_;
  std::unique_ptr<RegisteredAllocator> allocator_;
};

TEST_F(RegisteredAllocatorTest, EmptyTensorsLieInTheRegionUntilItIsFull) {
  MakeAllocator(1 << 16);
  absl::StatusOr<at::Tensor> a = allocator_->Empty({64, 64}, at::kFloat);  // 16 KiB
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(InRegion(a->data_ptr()));
  EXPECT_TRUE(allocator_->Holds(*a));
  EXPECT_THAT(allocator_->Empty({1 << 20}, at::kFloat).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("cannot hold")));
  EXPECT_THAT(allocator_->Empty({4, -1}, at::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(allocator_->Empty({int64_t{1} << 40, int64_t{1} << 40}, at::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2^64")));
  const size_t used = allocator_->used();
  *a = at::Tensor();
  EXPECT_LT(allocator_->used(), used);
  // The c10::Allocator interface falls back to ordinary memory, counted.
  c10::DataPtr big = allocator_->allocate(1 << 20);
  EXPECT_FALSE(InRegion(big.get()));
  EXPECT_EQ(allocator_->fallbacks(), 1);
}

TEST_F(RegisteredAllocatorTest, MoveInTakesTheStorageAndItsViewsAlong) {
  MakeAllocator(1 << 16);
  at::Tensor bucket = at::arange(1024, at::kFloat);
  at::Tensor view = bucket.narrow(0, 100, 10).view({2, 5});  // as DDP's gradient views
  ASSERT_FALSE(allocator_->Holds(bucket));
  ASSERT_TRUE(allocator_->MoveIn(bucket).ok());
  EXPECT_TRUE(InRegion(bucket.data_ptr()));
  EXPECT_TRUE(allocator_->Holds(view));
  EXPECT_EQ(view.data_ptr<float>(), bucket.data_ptr<float>() + 100);
  EXPECT_TRUE(at::equal(bucket, at::arange(1024, at::kFloat)));
  view.fill_(-1);  // writes through the view land in the moved storage
  EXPECT_EQ(bucket[104].item<float>(), -1);
  // Moving again changes nothing.
  const void* where = bucket.data_ptr();
  ASSERT_TRUE(allocator_->MoveIn(bucket).ok());
  EXPECT_EQ(bucket.data_ptr(), where);
  EXPECT_EQ(allocator_->used(), 4096u);
  // The block goes back with the last tensor of the storage.
  bucket = at::Tensor();
  EXPECT_EQ(allocator_->used(), 4096u);
  view = at::Tensor();
  EXPECT_EQ(allocator_->used(), 0u);
}

TEST_F(RegisteredAllocatorTest, MoveInRefusesWhatItCannotMoveAndLeavesItAlone) {
  MakeAllocator(1 << 12);
  at::Tensor whole = at::arange(64, at::kFloat);
  EXPECT_THAT(allocator_->MoveIn(whole.narrow(0, 8, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("whole of its storage")));
  EXPECT_THAT(allocator_->MoveIn(whole.view({8, 8}).t()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not contiguous")));
  std::vector<float> outside(64, 3.0f);
  at::Tensor blob = at::from_blob(outside.data(), {64}, at::kFloat);
  EXPECT_THAT(allocator_->MoveIn(blob),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("from_blob")));
  EXPECT_EQ(blob.data_ptr(), outside.data());
  std::unique_ptr<Aligned[]> other_memory(new Aligned[16]);
  rdma::MemoryRegion other_parent(reinterpret_cast<std::byte*>(other_memory.get()), 1024,
                                  rdma::RemoteRegion{}, nullptr);
  absl::StatusOr<std::unique_ptr<RegisteredAllocator>> other =
      RegisteredAllocator::Over(other_parent, 0, 1024);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<at::Tensor> elsewhere = (*other)->Empty({16}, at::kFloat);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_THAT(allocator_->MoveIn(*elsewhere),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("another registered region")));
  EXPECT_TRUE((*other)->Holds(*elsewhere));
  at::Tensor large = at::ones({4096}, at::kFloat);  // 16 KiB: more than the region
  const void* where = large.data_ptr();
  EXPECT_THAT(allocator_->MoveIn(large),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("cannot hold")));
  EXPECT_EQ(large.data_ptr(), where);
  EXPECT_TRUE(at::equal(large, at::ones({4096}, at::kFloat)));
  EXPECT_EQ(allocator_->used(), 0u);
}

}  // namespace
}  // namespace rdmaflow::runtime::torch
