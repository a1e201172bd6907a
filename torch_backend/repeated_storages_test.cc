// RepeatedStorages: the n-th sighting of a storage, through any of its
// views; dead storages forgotten; the bound on what is remembered.
#include "ATen/ops/zeros.h"
#include "torch_backend/repeated_storages.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::torch_backend {
namespace {

TEST(RepeatedStoragesTest, TrueOnceAtTheNthSightingOfTheSameStorage) {
  RepeatedStorages seen(/*sightings=*/2, /*capacity=*/16);
  at::Tensor bucket = at::zeros({128});
  at::Tensor other = at::zeros({128});
  EXPECT_FALSE(seen.Sighted(bucket));
  EXPECT_FALSE(seen.Sighted(other));
  EXPECT_TRUE(seen.Sighted(bucket.view({2, 64})));  // a view is the same storage
  EXPECT_FALSE(seen.Sighted(bucket));               // only once
  EXPECT_TRUE(seen.Sighted(other));
  EXPECT_FALSE(seen.Sighted(at::Tensor()));
  seen.Again(bucket);  // a move that could not be made: the next sighting retries
  EXPECT_TRUE(seen.Sighted(bucket));
  EXPECT_FALSE(seen.Sighted(bucket));
  RepeatedStorages first(/*sightings=*/1, /*capacity=*/16);
  EXPECT_TRUE(first.Sighted(bucket));
  EXPECT_FALSE(first.Sighted(bucket));
}

TEST(RepeatedStoragesTest, AStorageThatDiedIsNotSeenAgainInItsSuccessor) {
  RepeatedStorages seen(/*sightings=*/2, /*capacity=*/16);
  // DDP's first-step buckets die when it rebuilds them; the new ones, of the
  // same sizes and maybe at the same addresses, are first sightings.
  for (int step = 0; step < 50; ++step) {
    at::Tensor bucket = at::zeros({1024});
    EXPECT_FALSE(seen.Sighted(bucket)) << "step " << step;
  }
}

TEST(RepeatedStoragesTest, RemembersAtMostItsCapacityDroppingTheDeadFirst) {
  RepeatedStorages seen(/*sightings=*/2, /*capacity=*/4);
  std::vector<at::Tensor> live = {at::zeros({1}), at::zeros({1})};
  for (const at::Tensor& t : live) seen.Sighted(t);
  for (int i = 0; i < 2; ++i) seen.Sighted(at::zeros({1}));  // die at once
  EXPECT_EQ(seen.size(), 4u);
  at::Tensor late = at::zeros({1});
  seen.Sighted(late);  // the two dead ones go
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.Sighted(live[0]));
  EXPECT_TRUE(seen.Sighted(live[1]));
  EXPECT_TRUE(seen.Sighted(late));
  // All live and full: the longest-known one is forgotten.
  at::Tensor fourth = at::zeros({1});
  at::Tensor fifth = at::zeros({1});
  seen.Sighted(fourth);
  seen.Sighted(fifth);
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_FALSE(seen.Sighted(live[0]));  // a first sighting again
}

}  // namespace
}  // namespace rdmaflow::torch_backend
