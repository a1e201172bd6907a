// FaultyTransport over two loopback transports: each action does what it
// says to exactly the operations it selects, completions still fire once
// and never inline, and operations it does not select pass untouched.
#include "rdma/testing/faulty_transport.h"

#include <cstring>
#include <optional>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/loopback/loopback_transport.h"

namespace rdmaflow::rdma::testing {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using Action = FaultyTransport::Action;
using Op = FaultyTransport::Op;

class FaultyTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fabric = loopback::LoopbackFabric::Create();
    for (int rank : {0, 1}) {
      loopback::LoopbackTransportOptions options;
      options.rank = rank;
      options.fabric = fabric;
      auto created = loopback::LoopbackTransport::Create(options);
      ASSERT_THAT(created, IsOk());
      transports_.push_back(*std::move(created));
    }
    faulty_ = std::make_unique<FaultyTransport>(*transports_[0]);
    auto local = faulty_->Allocate(4096);
    auto remote = transports_[1]->Allocate(4096);
    ASSERT_THAT(local, IsOk());
    ASSERT_THAT(remote, IsOk());
    local_ = std::make_unique<MemoryRegion>(*std::move(local));
    remote_ = std::make_unique<MemoryRegion>(*std::move(remote));
    target_ = remote_->descriptor();
    std::memset(local_->data(), 7, 4096);
    auto endpoint = faulty_->Connect({1, transports_[1]->address()});
    ASSERT_THAT(endpoint, IsOk());
    endpoint_ = *std::move(endpoint);
  }

  // Posts a 64-byte write; its outcome lands in `*out`.
  absl::Status Write(std::optional<absl::Status>* out, size_t offset = 0) {
    return endpoint_->PostWrite({local_.get(), 0, 64}, {&target_, offset, 64}, std::nullopt,
                                [out](absl::Status s) {
                                  EXPECT_FALSE(out->has_value()) << "fired twice";
                                  *out = s;
                                });
  }
  // Progress on both sides until `*out` is set (or many rounds passed).
  void DriveUntil(const std::optional<absl::Status>& out, int max_rounds = 1000) {
    for (int i = 0; i < max_rounds && !out.has_value(); ++i) Round();
  }
  void Round() {
    ASSERT_THAT(faulty_->Progress(), IsOk());
    ASSERT_THAT(transports_[1]->Progress(), IsOk());
  }

  std::vector<std::unique_ptr<Transport>> transports_;
  std::unique_ptr<FaultyTransport> faulty_;
  std::unique_ptr<MemoryRegion> local_;
  std::unique_ptr<MemoryRegion> remote_;
  RemoteRegion target_;
  std::unique_ptr<Endpoint> endpoint_;
};

TEST_F(FaultyTransportTest, FailsOnlyTheNthOperationAndNeverInline) {
  FaultyTransport::Fault fault;
  fault.op = Op::kWrite;
  fault.nth = 2;
  fault.status = absl::DataLossError("boom");
  faulty_->AddFault(fault);
  std::optional<absl::Status> first, second, third;
  ASSERT_THAT(Write(&first), IsOk());
  ASSERT_THAT(Write(&second, 64), IsOk());
  ASSERT_THAT(Write(&third, 128), IsOk());
  EXPECT_FALSE(second.has_value());  // never inline
  DriveUntil(first);
  DriveUntil(second);
  DriveUntil(third);
  EXPECT_THAT(*first, IsOk());
  EXPECT_THAT(*second, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(*third, IsOk());
  EXPECT_EQ(remote_->data()[64], std::byte{0});  // the failed write was not posted
  EXPECT_EQ(remote_->data()[128], std::byte{7});
  EXPECT_EQ(faulty_->injected(), 1);
}

TEST_F(FaultyTransportTest, DelaysACompletionByProgressCalls) {
  FaultyTransport::Fault fault;
  fault.action = Action::kDelay;
  fault.delay_progress = 5;
  faulty_->AddFault(fault);
  std::optional<absl::Status> out;
  ASSERT_THAT(Write(&out), IsOk());
  int rounds = 0;
  while (!out.has_value() && rounds < 100) {
    Round();
    ++rounds;
  }
  ASSERT_TRUE(out.has_value());
  EXPECT_THAT(*out, IsOk());
  EXPECT_GE(rounds, 6);  // the real completion, then 5 held passes
}

TEST_F(FaultyTransportTest, DroppedCompletionFiresCancelledOnClose) {
  FaultyTransport::Fault fault;
  fault.action = Action::kDrop;
  faulty_->AddFault(fault);
  std::optional<absl::Status> out;
  ASSERT_THAT(Write(&out), IsOk());
  for (int i = 0; i < 100; ++i) Round();
  EXPECT_FALSE(out.has_value());
  ASSERT_THAT(endpoint_->Close(), IsOk());
  DriveUntil(out);
  EXPECT_THAT(out, ::testing::Optional(StatusIs(absl::StatusCode::kCancelled)));
}

TEST_F(FaultyTransportTest, CorruptsWhatLandsNotTheSource) {
  FaultyTransport::Fault fault;
  fault.action = Action::kCorrupt;
  fault.corrupt = [](uint64_t offset, absl::Span<std::byte> bytes) {
    EXPECT_EQ(offset, 256u);
    bytes[3] = std::byte{0xEE};
  };
  faulty_->AddFault(fault);
  std::optional<absl::Status> out;
  ASSERT_THAT(Write(&out, 256), IsOk());
  DriveUntil(out);
  EXPECT_THAT(*out, IsOk());
  EXPECT_EQ(remote_->data()[256 + 2], std::byte{7});
  EXPECT_EQ(remote_->data()[256 + 3], std::byte{0xEE});
  EXPECT_EQ(local_->data()[3], std::byte{7});
}

TEST_F(FaultyTransportTest, KilledPeerFailsEveryLaterOperation) {
  FaultyTransport::Fault fault;
  fault.action = Action::kKillPeer;
  fault.peer = 1;
  fault.nth = 2;
  faulty_->AddFault(fault);
  std::vector<std::optional<absl::Status>> outs(5);
  ASSERT_THAT(Write(&outs[0]), IsOk());
  for (int i = 1; i < 5; ++i) ASSERT_THAT(Write(&outs[i], 64 * i), IsOk());
  for (auto& out : outs) DriveUntil(out);
  EXPECT_THAT(*outs[0], IsOk());
  for (int i = 1; i < 5; ++i) {
    EXPECT_THAT(*outs[i], StatusIs(absl::StatusCode::kUnavailable)) << i;
  }
  std::optional<absl::Status> flushed;
  ASSERT_THAT(endpoint_->PostFlush([&](absl::Status s) { flushed = s; }), IsOk());
  DriveUntil(flushed);
  EXPECT_THAT(*flushed, StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(FaultyTransportTest, RequiredPrepareRefusesPostsToUnpreparedRegions) {
  faulty_->require_prepare();
  std::optional<absl::Status> out;
  EXPECT_THAT(Write(&out), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(out.has_value()) << "a refused post keeps its callback";
  // Another region's preparation does not count for this one.
  ASSERT_OK_AND_ASSIGN(MemoryRegion other, transports_[1]->Allocate(64));
  ASSERT_OK(endpoint_->Prepare(other.descriptor()));
  EXPECT_THAT(Write(&out), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(endpoint_->Prepare(target_));
  ASSERT_THAT(Write(&out), IsOk());
  DriveUntil(out);
  EXPECT_THAT(*out, IsOk());
}

}  // namespace
}  // namespace rdmaflow::rdma::testing
