// Endpoint::MapRemote on the loopback backend: a peer's region is the
// peer's own memory (ranks share the process), checked like a post; a
// forged key or a closed endpoint maps nothing.
#include <cstring>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/loopback_pair.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(LoopbackMapTest, APeersRegionMapsToItsOwnMemoryWithinBounds) {
  ASSERT_OK_AND_ASSIGN(testing::LoopbackPair pair, testing::LoopbackPair::Create());
  ASSERT_OK_AND_ASSIGN(MemoryRegion region, pair.transports[1]->Allocate(256));
  std::memset(region.data(), 0, region.size());
  const RemoteRegion descriptor = region.descriptor();
  ASSERT_OK_AND_ASSIGN(std::byte* mapped, pair.to_1->MapRemote({&descriptor, 64, 64}));
  EXPECT_EQ(mapped, region.data() + 64);
  std::memset(mapped, 0x3C, 64);
  EXPECT_EQ(region.data()[64], std::byte{0x3C});
  EXPECT_EQ(region.data()[128], std::byte{0});

  EXPECT_THAT(pair.to_1->MapRemote({&descriptor, 200, 64}),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside")));
  // The region is rank 1's: rank 1's endpoint to rank 0 may not map it.
  EXPECT_THAT(pair.to_0->MapRemote({&descriptor, 0, 64}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("belongs to rank 1")));
  RemoteRegion forged = descriptor;
  forged.address += 1 << 20;  // a peer lying about where its memory is
  EXPECT_THAT(pair.to_1->MapRemote({&forged, 0, 64}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("outside the region")));
  ASSERT_OK(pair.to_1->Close());
  EXPECT_THAT(pair.to_1->MapRemote({&descriptor, 0, 64}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
}

}  // namespace
}  // namespace rdmaflow::rdma
