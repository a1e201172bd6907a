// The blocking helpers when the peer is slower than the deadline: a helper
// that gives up has cancelled (or fenced) its operation before it returns,
// so nothing lands in memory the caller reuses afterwards, the endpoint is
// closed, and the error names the peer and the operation. A stalled fabric
// is modelled by StallingTransport (below); FaultyTransport drops or delays
// completions.
#include "rdma/blocking.h"

#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A Transport decorator for a fabric that stops moving: while stalled, its
// Progress() does not reach the inner transport, so nothing posted there
// executes or completes (a slow peer's side of a one-sided operation, as
// seen by the poster). It counts the operations posted through it whose
// completion has not fired yet. With `resume_on_close`, closing one of its
// endpoints ends the stall (the cancellation goes through); without it the
// operation stays stuck past the helper's grace period.
// Thread-compatible.
class StallingTransport final : public testing::TransportWrapper {
 public:
  explicit StallingTransport(Transport& inner) : TransportWrapper(inner) {}

  bool stalled = false;
  bool resume_on_close = false;
  int64_t outstanding() const { return *outstanding_; }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const PeerInfo& peer) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> connected, inner().Connect(peer));
    return std::unique_ptr<Endpoint>(new StallingEndpoint(*this, std::move(connected)));
  }
  absl::StatusOr<int> Progress() override {
    if (stalled) return 0;
    return inner().Progress();
  }

 private:
  class StallingEndpoint final : public Endpoint {
   public:
    StallingEndpoint(StallingTransport& transport, std::unique_ptr<Endpoint> inner)
        : transport_(transport), inner_(std::move(inner)) {}
    int peer_rank() const override { return inner_->peer_rank(); }
    absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                           std::optional<uint32_t> notification, Completion done) override {
      return Counted(inner_->PostWrite(src, dst, notification, Wrap(std::move(done))));
    }
    absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                          Completion done) override {
      return Counted(inner_->PostRead(dst, src, Wrap(std::move(done))));
    }
    absl::Status PostFlush(Completion done) override {
      return Counted(inner_->PostFlush(Wrap(std::move(done))));
    }
    absl::Status Close() override {
      if (transport_.resume_on_close) transport_.stalled = false;
      return inner_->Close();
    }

   private:
    Completion Wrap(Completion done) {
      return [count = transport_.outstanding_, done = std::move(done)](absl::Status s) mutable {
        --*count;
        std::move(done)(std::move(s));
      };
    }
    absl::Status Counted(absl::Status posted) {
      if (posted.ok()) ++*transport_.outstanding_;
      return posted;
    }
    StallingTransport& transport_;
    std::unique_ptr<Endpoint> inner_;
  };

  // Shared with the wrapped completions, which may outlive an endpoint.
  std::shared_ptr<int64_t> outstanding_ = std::make_shared<int64_t>(0);
};

constexpr size_t kBytes = 4096;
constexpr absl::Duration kTimeout = absl::Milliseconds(200);

// Rank 0 (through `stalling`, optionally over a FaultyTransport) and rank 1
// on one loopback fabric; rank 1's region holds 0xAB, rank 0's zeros.
class BlockingTest : public ::testing::Test {
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
    faulty_ = std::make_unique<testing::FaultyTransport>(*transports_[0]);
    stalling_ = std::make_unique<StallingTransport>(*faulty_);
    auto local = stalling_->Allocate(kBytes);
    auto remote = transports_[1]->Allocate(kBytes);
    ASSERT_THAT(local, IsOk());
    ASSERT_THAT(remote, IsOk());
    local_ = std::make_unique<MemoryRegion>(*std::move(local));
    remote_ = std::make_unique<MemoryRegion>(*std::move(remote));
    std::memset(remote_->data(), 0xAB, kBytes);
    target_ = remote_->descriptor();
    auto endpoint = stalling_->Connect({1, transports_[1]->address()});
    ASSERT_THAT(endpoint, IsOk());
    endpoint_ = *std::move(endpoint);
  }

  absl::Status ReadAll(absl::Time deadline) {
    return Read(*stalling_, *endpoint_, {local_.get(), 0, kBytes}, {&target_, 0, kBytes},
                deadline);
  }
  // After the helper returned, the caller reuses its buffer; the fabric
  // then moves again for a while.
  void ReuseAndDrain(std::byte fill) {
    std::memset(local_->data(), static_cast<int>(fill), kBytes);
    stalling_->stalled = false;
    for (int i = 0; i < 100; ++i) {
      ASSERT_THAT(stalling_->Progress(), IsOk());
      ASSERT_THAT(transports_[1]->Progress(), IsOk());
    }
  }
  bool LocalIsAll(std::byte value) const {
    for (size_t i = 0; i < kBytes; ++i) {
      if (local_->data()[i] != value) return false;
    }
    return true;
  }

  std::vector<std::unique_ptr<Transport>> transports_;
  std::unique_ptr<testing::FaultyTransport> faulty_;
  std::unique_ptr<StallingTransport> stalling_;
  std::unique_ptr<MemoryRegion> local_;
  std::unique_ptr<MemoryRegion> remote_;
  RemoteRegion target_;
  std::unique_ptr<Endpoint> endpoint_;
};

TEST_F(BlockingTest, TimedOutReadIsCancelledBeforeItReturns) {
  stalling_->stalled = true;
  stalling_->resume_on_close = true;
  EXPECT_THAT(ReadAll(absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("a read from rank 1"), HasSubstr("closed the endpoint"),
                             HasSubstr("nothing of it lands later"))));
  // Its completion fired before the helper returned.
  EXPECT_EQ(stalling_->outstanding(), 0);
  ReuseAndDrain(std::byte{0x11});
  EXPECT_TRUE(LocalIsAll(std::byte{0x11})) << "the timed-out read landed after it returned";
  // The endpoint was closed: later operations are refused, not posted.
  EXPECT_THAT(ReadAll(absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
}

TEST_F(BlockingTest, TimedOutWriteIsCancelledBeforeItReturns) {
  stalling_->stalled = true;
  stalling_->resume_on_close = true;
  std::memset(local_->data(), 0x22, kBytes);
  EXPECT_THAT(Write(*stalling_, *endpoint_, {local_.get(), 0, kBytes}, {&target_, 0, kBytes},
                    std::nullopt, absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a write to rank 1")));
  EXPECT_EQ(stalling_->outstanding(), 0);
  ReuseAndDrain(std::byte{0x33});
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(remote_->data()[i], std::byte{0xAB}) << "the timed-out write landed at " << i;
  }
}

TEST_F(BlockingTest, TimedOutFlushIsCancelledBeforeItReturns) {
  stalling_->stalled = true;
  stalling_->resume_on_close = true;
  EXPECT_THAT(Flush(*stalling_, *endpoint_, absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a flush to rank 1")));
  EXPECT_EQ(stalling_->outstanding(), 0);
}

TEST_F(BlockingTest, NothingIsPostedPastTheDeadline) {
  EXPECT_THAT(ReadAll(absl::Now() - absl::Seconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a read from rank 1")));
  EXPECT_EQ(stalling_->outstanding(), 0);
  ReuseAndDrain(std::byte{0x11});
  EXPECT_TRUE(LocalIsAll(std::byte{0x11})) << "a read posted past its deadline landed later";
  // Nothing was in flight, so the endpoint stays usable.
  EXPECT_THAT(ReadAll(absl::Now() + absl::Seconds(60)), IsOk());
  EXPECT_TRUE(LocalIsAll(std::byte{0xAB}));
}

TEST_F(BlockingTest, DroppedCompletionIsCancelledBeforeItReturns) {
  testing::FaultyTransport::Fault drop;
  drop.op = testing::FaultyTransport::Op::kRead;
  drop.action = testing::FaultyTransport::Action::kDrop;
  faulty_->AddFault(drop);
  EXPECT_THAT(ReadAll(absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("a read from rank 1"), HasSubstr("CANCELLED"))));
  EXPECT_EQ(stalling_->outstanding(), 0) << "returned with the dropped read still owed";
  EXPECT_EQ(faulty_->injected(), 1);
}

TEST_F(BlockingTest, DelayedCompletionEndsBeforeItReturns) {
  // The completion comes late, but within the grace period after the
  // close: the helper waits for it rather than leave it in flight.
  testing::FaultyTransport::Fault delay;
  delay.op = testing::FaultyTransport::Op::kRead;
  delay.action = testing::FaultyTransport::Action::kDelay;
  delay.delay_progress = 20;
  faulty_->AddFault(delay);
  stalling_->stalled = true;
  stalling_->resume_on_close = true;
  EXPECT_THAT(ReadAll(absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a read from rank 1")));
  EXPECT_EQ(stalling_->outstanding(), 0);
  ReuseAndDrain(std::byte{0x11});
  EXPECT_TRUE(LocalIsAll(std::byte{0x11}));
}

TEST_F(BlockingTest, UncancellableReadIsReportedAndEndsHarmlesslyLater) {
  // The fabric stays stalled through the close: the helper cannot see the
  // cancellation through, says so, and returns after its grace period.
  stalling_->stalled = true;
  const absl::Time start = absl::Now();
  EXPECT_THAT(ReadAll(start + kTimeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("did not end within"), HasSubstr("may still write"),
                             Not(HasSubstr("nothing of it lands later")))));
  EXPECT_LT(absl::Now() - start, kTimeout + absl::Seconds(10));  // bounded
  EXPECT_EQ(stalling_->outstanding(), 1);
  // The caller kept the buffer alive, as told. When the fabric moves again
  // the closed endpoint cancels the read (nothing lands) and its callback
  // fires into the helper's heap state, long after the helper returned.
  ReuseAndDrain(std::byte{0x11});
  EXPECT_EQ(stalling_->outstanding(), 0);
  EXPECT_TRUE(LocalIsAll(std::byte{0x11}));
}

}  // namespace
}  // namespace rdmaflow::rdma
