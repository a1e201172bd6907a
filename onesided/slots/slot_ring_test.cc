// The credited slot ring over a loopback pair: messages arrive whole and in
// order, the sender stops at its window and resumes on credit, flags land
// in order of messages (delivered()), and forged flags and credits fail the
// link with kDataLoss naming the peer. Each test runs over endpoints that
// order their writes (the flag follows its payload at once) and over ones
// that do not (the flag waits for the payload's flush).
#include "onesided/slots/slot_ring.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/loopback_pair.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kSlots = 4;
constexpr size_t kSlotBytes = 64;

// Rank 0 sends to rank 1. Rank 1's inbox: kSlots flags, then kSlots
// payload slots, then its credit source word. Rank 0's outbox: kSlots flag
// sources, its credit word, then the payload it sends from.
constexpr size_t kInboxSlots = kSlots * kSlotWordBytes;
constexpr size_t kInboxCreditSource = kInboxSlots + kSlots * kSlotBytes;
constexpr size_t kInboxBytes = kInboxCreditSource + kSlotWordBytes;
constexpr size_t kOutboxCredit = kSlots * kSlotWordBytes;
constexpr size_t kOutboxPayload = kOutboxCredit + kSlotWordBytes;
constexpr size_t kOutboxBytes = kOutboxPayload + kSlots * kSlotBytes;

class SlotRingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    absl::StatusOr<rdma::testing::LoopbackPair> pair =
        rdma::testing::LoopbackPair::Create(/*orders_writes=*/GetParam());
    ASSERT_THAT(pair, IsOk());
    transports_ = std::move(pair->transports);
    auto outbox = transports_[0]->Allocate(kOutboxBytes);
    auto inbox = transports_[1]->Allocate(kInboxBytes);
    ASSERT_THAT(outbox, IsOk());
    ASSERT_THAT(inbox, IsOk());
    outbox_ = std::make_unique<rdma::MemoryRegion>(*std::move(outbox));
    inbox_ = std::make_unique<rdma::MemoryRegion>(*std::move(inbox));
    remote_inbox_ = inbox_->descriptor();
    remote_outbox_ = outbox_->descriptor();
    to_1_ = std::move(pair->to_1);
    to_0_ = std::move(pair->to_0);

    SlotRingSender::Options send;
    send.slots = kSlots;
    send.peer = "rank 1";
    send.endpoint = to_1_.get();
    send.flag_source = outbox_.get();
    send.remote_flags = &remote_inbox_;
    send.credit_word = outbox_->data() + kOutboxCredit;
    sender_ = std::make_unique<SlotRingSender>(send);
    SlotRingReceiver::Options receive;
    receive.slots = kSlots;
    receive.peer = "rank 0";
    receive.endpoint = to_0_.get();
    receive.flags = inbox_->data();
    receive.credit_source = inbox_.get();
    receive.credit_source_offset = kInboxCreditSource;
    receive.remote_credit = &remote_outbox_;
    receive.remote_credit_offset = kOutboxCredit;
    receiver_ = std::make_unique<SlotRingReceiver>(receive);
  }

  // Sends message `seq` holding `fill` bytes if there is room.
  absl::StatusOr<bool> TrySend(std::byte fill) {
    ASSIGN_OR_RETURN(bool room, sender_->HasRoom());
    if (!room) return false;
    const uint64_t seq = sender_->Claim();
    const size_t source = kOutboxPayload + sender_->slot(seq) * kSlotBytes;
    std::memset(outbox_->data() + source, static_cast<int>(fill), kSlotBytes);
    sender_->Write(seq, {outbox_.get(), source, kSlotBytes},
                   {&remote_inbox_, kInboxSlots + sender_->slot(seq) * kSlotBytes, kSlotBytes});
    sender_->Commit(seq);
    RETURN_IF_ERROR(sender_->Post());
    return true;
  }

  // One round of both ranks' progress.
  absl::Status Round() {
    for (auto& transport : transports_) RETURN_IF_ERROR(transport->Progress().status());
    RETURN_IF_ERROR(sender_->Post());
    return absl::OkStatus();
  }

  // First, so destroyed last: a transport's destructor cancels what is
  // still posted, and those completions reach the ring's halves (which must
  // outlive them, as slot_ring.h says).
  std::unique_ptr<SlotRingSender> sender_;
  std::unique_ptr<SlotRingReceiver> receiver_;
  std::vector<std::unique_ptr<rdma::loopback::LoopbackTransport>> transports_;
  std::unique_ptr<rdma::MemoryRegion> outbox_, inbox_;
  rdma::RemoteRegion remote_inbox_, remote_outbox_;
  std::unique_ptr<rdma::Endpoint> to_1_, to_0_;
};

TEST_P(SlotRingTest, MessagesArriveWholeInOrderAndTheWindowWaitsForCredit) {
  constexpr int kMessages = 3 * kSlots + 1;
  int sent = 0, received = 0;
  int refused = 0;
  for (int round = 0; round < 10000 && received < kMessages; ++round) {
    if (sent < kMessages) {
      absl::StatusOr<bool> ok = TrySend(static_cast<std::byte>(sent + 1));
      ASSERT_THAT(ok, IsOk());
      if (*ok) {
        ++sent;
      } else {
        ++refused;
        // Never more than a window ahead of what the receiver released.
        EXPECT_EQ(sender_->claimed() - sender_->credit_seen(), static_cast<uint64_t>(kSlots));
      }
    }
    ASSERT_THAT(Round(), IsOk());
    absl::StatusOr<bool> arrived = receiver_->Arrived();
    ASSERT_THAT(arrived, IsOk());
    // The receiver consumes one message every other round: the sender fills
    // its window and waits.
    if (*arrived && round % 2 == 0) {
      const std::byte* payload = inbox_->data() + kInboxSlots + receiver_->slot() * kSlotBytes;
      for (size_t i = 0; i < kSlotBytes; ++i) {
        ASSERT_EQ(payload[i], static_cast<std::byte>(received + 1)) << "message " << received;
      }
      receiver_->Consume();
      ++received;
      ASSERT_THAT(receiver_->PostCredit(), IsOk());
    }
  }
  EXPECT_EQ(received, kMessages);
  EXPECT_GT(refused, 0);
  for (int round = 0; round < 100 && !sender_->idle(); ++round) ASSERT_THAT(Round(), IsOk());
  EXPECT_EQ(sender_->delivered(), static_cast<uint64_t>(kMessages));
  EXPECT_TRUE(sender_->idle());
}

TEST_P(SlotRingTest, AFlagOnlyMessageNeedsNoPayload) {
  ASSERT_THAT(sender_->HasRoom(), IsOk());
  const uint64_t seq = sender_->Claim();
  sender_->Commit(seq, /*had_writes=*/false);
  ASSERT_THAT(sender_->Post(), IsOk());
  bool arrived = false;
  for (int round = 0; round < 100 && !arrived; ++round) {
    ASSERT_THAT(Round(), IsOk());
    absl::StatusOr<bool> now = receiver_->Arrived();
    ASSERT_THAT(now, IsOk());
    arrived = *now;
  }
  EXPECT_TRUE(arrived);
}

TEST_P(SlotRingTest, OverOrderedWritesTheFlagGoesWithItsPayload) {
  EXPECT_EQ(sender_->flags_follow_writes(), GetParam());
  for (int message = 0; message < 2 * kSlots; ++message) {
    SCOPED_TRACE(absl::StrCat("message ", message));
    ASSERT_THAT(TrySend(static_cast<std::byte>(0x40 + message)), IsOk());
    int rounds = 0;
    bool arrived = false;
    while (!arrived && rounds < 100) {
      ASSERT_THAT(Round(), IsOk());
      ++rounds;
      absl::StatusOr<bool> now = receiver_->Arrived();
      ASSERT_THAT(now, IsOk());
      arrived = *now;
    }
    ASSERT_TRUE(arrived);
    // Whole when its flag is seen, either way.
    const std::byte* payload = inbox_->data() + kInboxSlots + receiver_->slot() * kSlotBytes;
    for (size_t i = 0; i < kSlotBytes; ++i) {
      ASSERT_EQ(payload[i], static_cast<std::byte>(0x40 + message));
    }
    // Loopback runs a round's operations in post order: a flag posted
    // behind its payload lands in the payload's round; one that waits for
    // the flush is posted after the round that completed it.
    if (GetParam()) {
      EXPECT_EQ(rounds, 1);
    } else {
      EXPECT_GT(rounds, 1);
    }
    receiver_->Consume();
    ASSERT_THAT(receiver_->PostCredit(), IsOk());
    for (int round = 0; round < 100 && !sender_->idle(); ++round) ASSERT_THAT(Round(), IsOk());
    ASSERT_TRUE(sender_->idle());
    // The flush behind the flag still says when the payload's source may
    // be reused.
    EXPECT_EQ(sender_->written(), static_cast<uint64_t>(message + 1));
    EXPECT_EQ(sender_->delivered(), static_cast<uint64_t>(message + 1));
  }
}

void Forge(std::byte* word, uint64_t value) { std::memcpy(word, &value, sizeof(value)); }

TEST_P(SlotRingTest, AForgedFlagFailsTheLinkForGood) {
  Forge(inbox_->data() + 2 * kSlotWordBytes, 77);  // not slot 0's: ignored until due
  EXPECT_THAT(receiver_->Arrived(), IsOk());
  Forge(inbox_->data(), 5);  // slot 0 may hold 0 (nothing yet) or 1
  EXPECT_THAT(receiver_->Arrived(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank 0 wrote 5 into the flag of slot 0"),
                             HasSubstr("1 (message 0) or, before it, 0"))));
  Forge(inbox_->data(), 1);  // even a good value later: the link stays failed
  EXPECT_THAT(receiver_->Arrived(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(receiver_->PostCredit(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_P(SlotRingTest, AFlagFromTheSlotsPreviousRoundIsNotAnArrival) {
  // Messages 0..3 consumed; message 4 reuses slot 0, whose flag still says 1.
  for (int i = 0; i < kSlots; ++i) {
    Forge(inbox_->data() + i * kSlotWordBytes, i + 1);
    absl::StatusOr<bool> arrived = receiver_->Arrived();
    ASSERT_THAT(arrived, IsOk());
    ASSERT_TRUE(*arrived);
    receiver_->Consume();
  }
  absl::StatusOr<bool> next = receiver_->Arrived();
  ASSERT_THAT(next, IsOk());
  EXPECT_FALSE(*next);
  Forge(inbox_->data(), 5);
  next = receiver_->Arrived();
  ASSERT_THAT(next, IsOk());
  EXPECT_TRUE(*next);
}

TEST_P(SlotRingTest, ACreditBeyondWhatWasSentFailsTheSender) {
  ASSERT_THAT(TrySend(std::byte{1}), IsOk());
  Forge(outbox_->data() + kOutboxCredit, 2);  // one message was sent
  EXPECT_THAT(sender_->HasRoom(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("rank 1 wrote a credit releasing 2 messages, but only 1 were sent")));
  EXPECT_THAT(sender_->Post(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_P(SlotRingTest, ACreditThatGoesBackFailsTheSender) {
  ASSERT_THAT(TrySend(std::byte{1}), IsOk());
  ASSERT_THAT(TrySend(std::byte{2}), IsOk());
  Forge(outbox_->data() + kOutboxCredit, 2);
  EXPECT_THAT(sender_->Credit(), IsOk());
  Forge(outbox_->data() + kOutboxCredit, 1);
  EXPECT_THAT(sender_->Credit(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("rank 1 wrote a credit of 1 after 2; credits never go back")));
}

TEST_P(SlotRingTest, ADeadReceiverFailsTheSender) {
  receiver_.reset();
  to_0_.reset();
  transports_[1].reset();
  absl::Status status;
  for (int round = 0; round < 1000 && status.ok(); ++round) {
    absl::StatusOr<bool> sent = TrySend(std::byte{1});
    if (!sent.ok()) {
      status = sent.status();
      break;
    }
    status = transports_[0]->Progress().status();
    if (status.ok()) status = sender_->Post();
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  for (int round = 0; round < 100 && sender_->outstanding() > 0; ++round) {
    transports_[0]->Progress().IgnoreError();
  }
  EXPECT_EQ(sender_->outstanding(), 0);
}

INSTANTIATE_TEST_SUITE_P(Writes, SlotRingTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Ordered" : "Flushed";
                         });

}  // namespace
}  // namespace rdmaflow::onesided
