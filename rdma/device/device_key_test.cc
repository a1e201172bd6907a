// A device region's key as a peer may forge it: every bad field refused by
// name, and a region that would run past its allocation refused with
// overflow-safe arithmetic.
#include "rdma/device/device_key.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/device/device_key.pb.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

DeviceKey Valid() {
  DeviceKey key;
  key.host = "0f2c7a1e-5b1d-4f5e-9f1a-0123456789ab";
  key.device = 0;
  for (size_t i = 0; i < key.handle.bytes.size(); ++i) key.handle.bytes[i] = i * 7;
  key.offset = 4096;
  key.allocation_size = 1 << 20;
  return key;
}

DeviceKeyProto AsProto(const DeviceKey& key) {
  DeviceKeyProto proto;
  EXPECT_TRUE(proto.ParseFromString(key.Serialize()));
  return proto;
}

TEST(DeviceKeyTest, RoundTrips) {
  const DeviceKey key = Valid();
  ASSERT_OK_AND_ASSIGN(DeviceKey parsed, DeviceKey::Parse(key.Serialize(), 1000));
  EXPECT_EQ(parsed.host, key.host);
  EXPECT_EQ(parsed.device, key.device);
  EXPECT_EQ(parsed.handle.bytes, key.handle.bytes);
  EXPECT_EQ(parsed.offset, key.offset);
  EXPECT_EQ(parsed.allocation_size, key.allocation_size);
}

TEST(DeviceKeyTest, RegionMustLieInsideItsAllocation) {
  const DeviceKey key = Valid();
  // Exactly to the end: fine; one byte more: refused.
  EXPECT_THAT(DeviceKey::Parse(key.Serialize(), (1 << 20) - 4096), IsOk());
  EXPECT_THAT(DeviceKey::Parse(key.Serialize(), (1 << 20) - 4095),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offset 4096")));
  // Sums that would wrap around.
  DeviceKey wrap = Valid();
  wrap.offset = std::numeric_limits<uint64_t>::max() - 10;
  wrap.allocation_size = std::numeric_limits<uint64_t>::max();
  EXPECT_THAT(DeviceKey::Parse(wrap.Serialize(), 100),
              StatusIs(absl::StatusCode::kInvalidArgument));
  DeviceKey past = Valid();
  past.offset = past.allocation_size + 1;
  EXPECT_THAT(DeviceKey::Parse(past.Serialize(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DeviceKeyTest, ForgedFieldsAreRefusedByName) {
  DeviceKeyProto proto = AsProto(Valid());
  proto.set_version(DeviceKey::kVersion + 1);
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("version ", DeviceKey::kVersion + 1))));
  proto = AsProto(Valid());
  proto.set_ipc_handle(std::string(63, 'x'));
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("63-byte IPC handle")));
  proto.set_ipc_handle(std::string(1 << 16, 'x'));
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("IPC handle")));
  proto = AsProto(Valid());
  proto.set_host("");
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host identity")));
  proto.set_host(std::string(DeviceKey::kMaxHostBytes + 1, 'h'));
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host identity")));
  proto = AsProto(Valid());
  proto.set_device(-1);
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device -1")));
}

TEST(DeviceKeyTest, AKeyCorruptedOnItsWayIsRefused) {
  // Any one field changed without its check word: the handle (which the
  // staged path would not otherwise look at), the host, the offset.
  DeviceKeyProto proto = AsProto(Valid());
  std::string handle = proto.ipc_handle();
  handle[17] ^= 0x5a;
  proto.set_ipc_handle(handle);
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("check word")));
  proto = AsProto(Valid());
  proto.set_host("host-b");
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("check word")));
  proto = AsProto(Valid());
  proto.set_offset(0);
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("check word")));
  // Resealed, the same change parses (the check is no defence against a
  // forger; the fields are checked on their own).
  proto.set_check(KeyCheck(proto.host(), proto.device(), proto.ipc_handle(), proto.offset(),
                           proto.allocation_size()));
  EXPECT_THAT(DeviceKey::Parse(proto.SerializeAsString(), 1), IsOk());
}

TEST(DeviceKeyTest, GarbageIsRefused) {
  EXPECT_THAT(DeviceKey::Parse("", 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DeviceKey::Parse(std::string("\xff\xff\xff\xff\x0f", 5), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Truncated at every length: an error, never a crash.
  const std::string whole = Valid().Serialize();
  for (size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(DeviceKey::Parse(whole.substr(0, n), 1).ok()) << n;
  }
}

TEST(DeviceKeyTest, ThisHostIsStable) {
  ASSERT_OK_AND_ASSIGN(std::string first, ThisHost());
  ASSERT_OK_AND_ASSIGN(std::string second, ThisHost());
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, second);
  EXPECT_LE(first.size(), DeviceKey::kMaxHostBytes);
}

}  // namespace
}  // namespace rdmaflow::rdma::device_path
