// The UCX envelopes as a store writer may leave them: what we wrap unwraps
// to the same bytes; another magic, a flipped checksum or payload byte, a
// truncation, an address whose identity is malformed, and every prefix of
// a valid envelope are kInvalidArgument naming what is wrong.
#include "rdma/ucx/envelope.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::ucx {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// This process's identity (its strict wire format: peer_liveness_test).
ProcessIdentity Sample() { return SelfIdentity(); }

TEST(UcxEnvelopeTest, WhatIsWrappedUnwrapsToTheSameBytes) {
  const std::string key = "\x01\x02packed rkey\x00\xff";
  ASSERT_OK_AND_ASSIGN(std::string unwrapped, UnwrapRkey(WrapRkey(key.data(), key.size())));
  EXPECT_EQ(unwrapped, key);
  const std::string ucx = "ucp address bytes";
  ASSERT_OK_AND_ASSIGN(WorkerAddress address,
                       UnwrapWorkerAddress(WrapWorkerAddress(Sample(), ucx.data(), ucx.size())));
  EXPECT_EQ(address.ucx, ucx);
  EXPECT_EQ(address.identity.pid, Sample().pid);
  EXPECT_EQ(address.identity.start_time, Sample().start_time);
  EXPECT_EQ(address.identity.boot_id.substr(0, Sample().boot_id.size()), Sample().boot_id);
}

TEST(UcxEnvelopeTest, ForgedAndCorruptedEnvelopesAreRefusedByName) {
  const std::string key = "packed rkey";
  const std::string wrapped = WrapRkey(key.data(), key.size());
  // An address is not a key, nor a key an address.
  const std::string ucx = "ucp address bytes";
  const std::string address = WrapWorkerAddress(Sample(), ucx.data(), ucx.size());
  EXPECT_THAT(UnwrapRkey(address), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("remote key (bad header)")));
  EXPECT_THAT(UnwrapWorkerAddress(wrapped),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("worker address (bad header)")));
  for (size_t at : {size_t{9}, wrapped.size() - 1}) {  // checksum, payload
    std::string flipped = wrapped;
    flipped[at] ^= 0x20;
    EXPECT_THAT(UnwrapRkey(flipped), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("checksum mismatch")))
        << "byte " << at;
  }
  for (size_t length = 0; length < wrapped.size(); ++length) {
    EXPECT_THAT(UnwrapRkey(wrapped.substr(0, length)),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << length << " bytes";
  }
  for (size_t length = 0; length < address.size(); ++length) {
    EXPECT_THAT(UnwrapWorkerAddress(address.substr(0, length)),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << length << " bytes";
  }
}

TEST(UcxEnvelopeTest, AnAddressCarriesItsFlagInbox) {
  const std::string ucx = "ucp address bytes";
  const FlagInboxAddress inbox{0x7f0000001000, 272448, 64, 512, "inbox key"};
  ASSERT_OK_AND_ASSIGN(WorkerAddress address,
                       UnwrapWorkerAddress(WrapWorkerAddress(Sample(), ucx.data(), ucx.size(), inbox)));
  ASSERT_TRUE(address.inbox.has_value());
  EXPECT_EQ(address.inbox->address, inbox.address);
  EXPECT_EQ(address.inbox->bytes, inbox.bytes);
  EXPECT_EQ(address.inbox->lanes, 64u);
  EXPECT_EQ(address.inbox->slots, 512u);
  EXPECT_EQ(address.inbox->rkey, "inbox key");
  EXPECT_EQ(address.ucx, ucx);
  ASSERT_OK_AND_ASSIGN(WorkerAddress without,
                       UnwrapWorkerAddress(WrapWorkerAddress(Sample(), ucx.data(), ucx.size())));
  EXPECT_FALSE(without.inbox.has_value());
}

TEST(UcxEnvelopeTest, AnInboxSectionWithoutAKeyOrPastTheEndIsRefused) {
  const std::string ucx = "u";
  // No key: the section is only its fixed part.
  const FlagInboxAddress keyless{4096, 1 << 20, 4, 8, ""};
  EXPECT_THAT(UnwrapWorkerAddress(WrapWorkerAddress(Sample(), ucx.data(), ucx.size(), keyless)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inbox section")));
  // A section that takes the UCX address's bytes: none are left.
  const FlagInboxAddress inbox{4096, 1 << 20, 4, 8, "k"};
  EXPECT_THAT(UnwrapWorkerAddress(WrapWorkerAddress(Sample(), "", 0, inbox)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no UCX address")));
}

TEST(UcxEnvelopeTest, AnAddressWithoutUcxBytesOrWithABadIdentityIsRefused) {
  EXPECT_THAT(UnwrapWorkerAddress(WrapWorkerAddress(Sample(), "", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
  ProcessIdentity bad = Sample();
  bad.boot_id = std::string(ProcessIdentity::kBootIdSize, '\n');
  const std::string ucx = "ucp";
  EXPECT_THAT(UnwrapWorkerAddress(WrapWorkerAddress(bad, ucx.data(), ucx.size())),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
