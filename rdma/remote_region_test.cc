#include "rdma/remote_region.h"

#include <limits>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/remote_region.pb.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

RemoteRegion Valid() { return {"ucx", 2, 0x1000, 4096, "key"}; }

TEST(RemoteRegionTest, RoundTripsThroughTheWireFormat) {
  ASSERT_OK_AND_ASSIGN(RemoteRegion parsed,
                       RemoteRegion::Parse(Valid().Serialize()));
  EXPECT_EQ(parsed.backend, "ucx");
  EXPECT_EQ(parsed.owner_rank, 2);
  EXPECT_EQ(parsed.address, 0x1000u);
  EXPECT_EQ(parsed.length, 4096u);
  EXPECT_EQ(parsed.packed_key, "key");
}

TEST(RemoteRegionTest, ValidateNamesTheBadField) {
  RemoteRegion r = Valid();
  r.length = 0;
  EXPECT_THAT(r.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("length 0")));
  r = Valid();
  r.owner_rank = -1;
  EXPECT_THAT(r.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("negative owner rank")));
  r = Valid();
  r.address = std::numeric_limits<uint64_t>::max() - 10;
  EXPECT_THAT(r.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("wraps")));
  r = Valid();
  r.packed_key.clear();
  EXPECT_THAT(r.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("no remote key")));
  // Parse refuses what Validate refuses.
  r = Valid();
  r.length = 0;
  EXPECT_THAT(RemoteRegion::Parse(r.Serialize()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckTransferTest, AcceptsExactFitAndRejectsOneByteMore) {
  RemoteRegion remote = Valid();
  MemoryRegion local(reinterpret_cast<std::byte*>(0x2000), 4096,
                     RemoteRegion{}, nullptr);
  EXPECT_THAT(CheckTransfer({&local, 0, 4096}, {&remote, 0, 4096}, 2, "ucx"),
              IsOk());
  EXPECT_THAT(CheckTransfer({&local, 0, 4096}, {&remote, 1, 4096}, 2, "ucx"),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(CheckTransfer({&local, 1, 4096}, {&remote, 0, 4096}, 2, "ucx"),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 3, "ucx"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("belongs to rank 2")));
  EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 2, "loopback"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("same transport")));
  // A device region is never taken for host memory by a host backend.
  remote.memory_kind = device::MemoryKind::kDevice;
  EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 2, "ucx"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ucx device region of rank 2"),
                             HasSubstr("moves host memory only"))));
  // The device path takes it, from host memory here too...
  EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 2, "ucx",
                            Moves::kPeerDeviceMemory),
              IsOk());
  EXPECT_THAT(CheckRemoteSlice({&remote, 0, 16}, 2, "ucx", Moves::kPeerDeviceMemory), IsOk());
  // ...and refuses a host region at the peer.
  remote.memory_kind = device::MemoryKind::kHost;
  EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 2, "ucx",
                            Moves::kPeerDeviceMemory),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reaches a peer's device memory only")));
  // A host backend never takes a local device region either.
  RemoteRegion device_descriptor = Valid();
  device_descriptor.memory_kind = device::MemoryKind::kDevice;
  MemoryRegion on_device(local.data(), local.size(), device_descriptor, nullptr);
  EXPECT_THAT(CheckTransfer({&on_device, 0, 16}, {&remote, 0, 16}, 2, "ucx"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("local region of an operation with peer rank 2 is device")));
  EXPECT_THAT(CheckTransfer({&on_device, 0, 16}, {&remote, 0, 16}, 2, "ucx",
                            Moves::kPeerDeviceMemory),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reaches a peer's device memory only")));
  // GPUDirect RDMA (ibverbs): either kind on either side, and still only
  // the backend's own, in bounds.
  for (device::MemoryKind kind : {device::MemoryKind::kHost, device::MemoryKind::kDevice}) {
    remote.memory_kind = kind;
    EXPECT_THAT(CheckTransfer({&on_device, 0, 16}, {&remote, 0, 16}, 2, "ucx",
                              Moves::kAnyMemory),
                IsOk());
    EXPECT_THAT(CheckTransfer({&local, 0, 16}, {&remote, 0, 16}, 2, "ucx", Moves::kAnyMemory),
                IsOk());
    EXPECT_THAT(CheckTransfer({&on_device, 0, 16}, {&remote, 0, 16}, 2, "loopback",
                              Moves::kAnyMemory),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("same transport")));
    EXPECT_THAT(CheckTransfer({&on_device, 0, 16}, {&remote, 4090, 16}, 2, "ucx",
                              Moves::kAnyMemory),
                StatusIs(absl::StatusCode::kOutOfRange));
  }
}

TEST(RemoteRegionTest, MemoryKindTravelsAndUnknownKindsAreRefused) {
  RemoteRegion host = Valid();
  ASSERT_OK_AND_ASSIGN(RemoteRegion parsed, RemoteRegion::Parse(host.Serialize()));
  EXPECT_EQ(parsed.memory_kind, device::MemoryKind::kHost);
  RemoteRegion on_device = Valid();
  on_device.memory_kind = device::MemoryKind::kDevice;
  ASSERT_OK_AND_ASSIGN(parsed, RemoteRegion::Parse(on_device.Serialize()));
  EXPECT_EQ(parsed.memory_kind, device::MemoryKind::kDevice);
  EXPECT_THAT(parsed.DebugString(), HasSubstr("device region"));
  // Forged kinds, including one that would narrow to a known value.
  for (uint32_t kind : {2u, 257u, 0xffffffffu}) {
    RemoteRegionProto proto;
    ASSERT_TRUE(proto.ParseFromString(host.Serialize()));
    proto.set_memory_kind(kind);
    EXPECT_THAT(RemoteRegion::Parse(proto.SerializeAsString()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("memory kind")))
        << kind;
  }
  RemoteRegion forged = Valid();
  forged.memory_kind = static_cast<device::MemoryKind>(9);
  EXPECT_THAT(forged.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("memory kind 9")));
}

}  // namespace
}  // namespace rdmaflow::rdma
