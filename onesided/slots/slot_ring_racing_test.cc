// File: slot_ring_racing_test.cc
// The slot ring's peer-written words against a peer that rewrites them while
// the ring polls (rdma/testing/racing_writer.h): a flag flipping between
// the values an honest sender may leave in it and forged ones, and a credit
// word flipping between honest counts and ones that go back or release
// unsent messages. Each word is loaded once: a poll answers from the value
// it checked (arrived, not yet, room or none), or fails the link with
// kDataLoss quoting that value and naming the peer, and the failure stays
// whatever the word says afterwards.
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/slots/slot_ring.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/loopback_pair.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::rdma::testing::Add;
using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::QuotedAfter;
using ::rdmaflow::rdma::testing::RaceOptions;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RaceUntilBothEndings;
using ::rdmaflow::rdma::testing::RacingWriter;
using ::rdmaflow::testing::IsOk;

constexpr int kSlots = 4;
constexpr uint64_t kHalf = uint64_t{1} << 63;

// Every ending valid or kDataLoss, and both seen (the race was a race).
void ExpectValidOrDataLoss(const RaceTally& tally, bool expect_both = true) {
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  if (expect_both) {
    EXPECT_GT(tally.ok, 0);
    EXPECT_GT(tally.data_loss, 0);
  }
  ::testing::Test::RecordProperty("calls", static_cast<int>(tally.calls));
  ::testing::Test::RecordProperty("refused", static_cast<int>(tally.data_loss));
  ::testing::Test::RecordProperty("writer_rounds", static_cast<int>(tally.writer_rounds));
}

// Rank 0 sends to rank 1 (as in slot_ring_test): rank 1's kSlots flag words
// and its credit source; rank 0's kSlots flag sources and its credit word.
// Nothing is posted: the racing writer stands for the peer.
class SlotRingRacingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<rdma::testing::LoopbackPair> pair = rdma::testing::LoopbackPair::Create();
    ASSERT_THAT(pair, IsOk());
    transports_ = std::move(pair->transports);
    auto outbox = transports_[0]->Allocate((kSlots + 1) * kSlotWordBytes);
    auto inbox = transports_[1]->Allocate((kSlots + 1) * kSlotWordBytes);
    ASSERT_THAT(outbox, IsOk());
    ASSERT_THAT(inbox, IsOk());
    outbox_ = std::make_unique<rdma::MemoryRegion>(*std::move(outbox));
    inbox_ = std::make_unique<rdma::MemoryRegion>(*std::move(inbox));
    std::memset(outbox_->data(), 0, outbox_->size());
    std::memset(inbox_->data(), 0, inbox_->size());
    remote_inbox_ = inbox_->descriptor();
    remote_outbox_ = outbox_->descriptor();
    to_1_ = std::move(pair->to_1);
    to_0_ = std::move(pair->to_0);
  }

  std::unique_ptr<SlotRingSender> NewSender() {
    SlotRingSender::Options send;
    send.slots = kSlots;
    send.peer = "rank 1";
    send.endpoint = to_1_.get();
    send.flag_source = outbox_.get();
    send.remote_flags = &remote_inbox_;
    send.credit_word = CreditWord();
    return std::make_unique<SlotRingSender>(send);
  }

  std::unique_ptr<SlotRingReceiver> NewReceiver() {
    SlotRingReceiver::Options receive;
    receive.slots = kSlots;
    receive.peer = "rank 0";
    receive.endpoint = to_0_.get();
    receive.flags = inbox_->data();
    receive.credit_source = inbox_.get();
    receive.credit_source_offset = kSlots * kSlotWordBytes;
    receive.remote_credit = &remote_outbox_;
    receive.remote_credit_offset = kSlots * kSlotWordBytes;
    return std::make_unique<SlotRingReceiver>(receive);
  }

  // Rank 1's flag words, rank 0's credit word.
  absl::Span<std::byte> Flags() { return absl::MakeSpan(inbox_->data(), kSlots * kSlotWordBytes); }
  std::byte* CreditWord() { return outbox_->data() + kSlots * kSlotWordBytes; }
  void SetFlag(int slot, uint64_t value) {
    __atomic_store_n(reinterpret_cast<uint64_t*>(inbox_->data() + slot * kSlotWordBytes), value,
                     __ATOMIC_RELEASE);
  }

  // Eight polls of the receiver's next message while the writer flips its
  // flag: arrived and not yet are both honest answers; a refusal must quote
  // a value in `forged` (the one it checked, not a reload) naming rank 0,
  // and after it every poll and credit is refused with the same error
  // although the writer goes on writing honest values.
  absl::Status PollOnce(SlotRingReceiver& receiver, const std::set<uint64_t>& forged) {
    for (int poll = 0; poll < 8; ++poll) {
      absl::StatusOr<bool> arrived = receiver.Arrived();
      if (arrived.ok()) continue;  // arrived or not: both are honest answers
      const absl::Status failure = arrived.status();
      if (failure.code() != absl::StatusCode::kDataLoss) return failure;
      const std::string message(failure.message());
      const std::optional<uint64_t> quoted = QuotedAfter(message, "rank 0 wrote ");
      if (!quoted.has_value() || forged.count(*quoted) == 0) {
        return absl::InternalError(absl::StrCat("refused quoting a value never forged: ", message));
      }
      for (int again = 0; again < 20; ++again) {
        absl::StatusOr<bool> later = receiver.Arrived();
        if (later.ok() || later.status() != failure) {
          return absl::InternalError(absl::StrCat(
              "a failed link answered ",
              later.ok() ? (*later ? "arrived" : "not yet") : later.status().ToString(), " after ",
              message));
        }
      }
      if (receiver.PostCredit() != failure) {
        return absl::InternalError("a failed link posted a credit");
      }
      return failure;
    }
    return absl::OkStatus();
  }

  // In creation order, so the endpoints and regions go before their
  // transports.
  std::vector<std::unique_ptr<rdma::loopback::LoopbackTransport>> transports_;
  std::unique_ptr<rdma::MemoryRegion> outbox_, inbox_;
  rdma::RemoteRegion remote_inbox_, remote_outbox_;
  std::unique_ptr<rdma::Endpoint> to_1_, to_0_;
};

// Slot 0 of message 0 may hold 0 (not yet) or 1 (arrived); 5 and 2^63 are
// forged. Each 8-byte word lands whole, as a NIC's aligned write does.
TEST_F(SlotRingRacingTest, AFirstFlagFlippingWithForgedOnesIsCheckedAsLoaded) {
  int64_t arrivals = 0;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(
            Flags(), 0,
            {BytesOf(uint64_t{0}), BytesOf(uint64_t{1}), BytesOf(uint64_t{5}), BytesOf(kHalf)},
            RacingWriter::Tearing::kWords);
      },
      [&]() -> absl::Status {
        std::unique_ptr<SlotRingReceiver> receiver = NewReceiver();
        absl::Status status = PollOnce(*receiver, {5, kHalf});
        if (status.ok()) ++arrivals;
        return status;
      });
  ExpectValidOrDataLoss(tally);
  RecordProperty("passed", static_cast<int>(arrivals));
}

// The same flag torn byte by byte between 1 and 2^56: a poll may load 0 or
// 2^56 + 1 too. 0 is "not yet"; the mixes are forged values and refused.
TEST_F(SlotRingRacingTest, ATornFirstFlagIsRefusedOrHonest) {
  const uint64_t high = uint64_t{1} << 56;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(Flags(), 0, {BytesOf(uint64_t{1}), BytesOf(high)});
      },
      [&]() -> absl::Status {
        std::unique_ptr<SlotRingReceiver> receiver = NewReceiver();
        return PollOnce(*receiver, {high, high + 1});
      });
  ExpectValidOrDataLoss(tally);
}

// A reused slot: after messages 0..3, message 4's flag (slot 0) may hold 1
// (message 0's, not yet) or 5 (arrived); 0 (back to nothing), 9 (the next
// lap's) and 2^64 - 1 are forged. The writer starts once the receiver has
// consumed the first lap.
TEST_F(SlotRingRacingTest, AReusedSlotsFlagFlippingWithForgedOnesIsCheckedAsLoaded) {
  RaceTally total;
  for (int episode = 0; episode < 100; ++episode) {
    for (int slot = 0; slot < kSlots; ++slot) SetFlag(slot, slot + 1);
    std::unique_ptr<SlotRingReceiver> receiver = NewReceiver();
    for (int seq = 0; seq < kSlots; ++seq) {
      absl::StatusOr<bool> arrived = receiver->Arrived();
      ASSERT_THAT(arrived, IsOk());
      ASSERT_TRUE(*arrived);
      receiver->Consume();
    }
    auto writer =
        RacingWriter::Flipping(Flags(), 0,
                               {BytesOf(uint64_t{1}), BytesOf(uint64_t{5}), BytesOf(uint64_t{0}),
                                BytesOf(uint64_t{9}), BytesOf(~uint64_t{0})},
                               RacingWriter::Tearing::kWords);
    RaceOptions options;
    options.min_calls = 20;
    options.min_writer_rounds = 50;
    const RaceTally tally = RaceParse(
        *writer,
        [&] {
          return PollOnce(*receiver, {0, 9, ~uint64_t{0}});
        },
        options);
    Add(total, tally);
  }
  ExpectValidOrDataLoss(total);
}

// Rank 0 has sent 3 messages. Its credit word flips between 2 and 3 (honest
// counts; 2 after 3 goes back) and 7 (releasing messages never sent) or
// 2^64 - 1. Every answer of HasRoom() follows from the credit it accepted
// (room exactly when fewer than kSlots messages are unreleased); a refusal
// quotes a value that was written and names rank 1, and stays. `written`:
// every value the word may hold (0 until the writer's first round).
absl::Status PollCredits(SlotRingSender& sender, const std::set<uint64_t>& written) {
  for (int i = 0; i < 3; ++i) sender.Claim();
  uint64_t seen = 0;
  for (int poll = 0; poll < 8; ++poll) {
    absl::StatusOr<bool> room = sender.HasRoom();
    if (room.ok()) {
      const uint64_t credit = sender.credit_seen();
      if (credit > sender.claimed() || credit < seen || written.count(credit) == 0) {
        return absl::InternalError(absl::StrCat("accepted a credit of ", credit, " after ", seen,
                                                " with ", sender.claimed(), " sent"));
      }
      if (*room != (sender.claimed() - credit < kSlots)) {
        return absl::InternalError(absl::StrCat("room ", *room, " with ", sender.claimed(),
                                                " sent and ", credit, " released"));
      }
      seen = credit;
      continue;
    }
    const absl::Status failure = room.status();
    if (failure.code() != absl::StatusCode::kDataLoss) return failure;
    const std::string message(failure.message());
    std::optional<uint64_t> quoted = QuotedAfter(message, "rank 1 wrote a credit of ");
    if (!quoted.has_value()) quoted = QuotedAfter(message, "rank 1 wrote a credit releasing ");
    if (!quoted.has_value() || written.count(*quoted) == 0 ||
        (*quoted <= sender.claimed() && *quoted >= seen)) {
      return absl::InternalError(absl::StrCat("refused quoting an acceptable value: ", message));
    }
    for (int again = 0; again < 20; ++again) {
      if (sender.Credit().status() != failure || sender.Post() != failure) {
        return absl::InternalError(absl::StrCat("a failed sender recovered after ", message));
      }
    }
    return failure;
  }
  return absl::OkStatus();
}

TEST_F(SlotRingRacingTest, ACreditFlippingWithForgedOnesIsCheckedAsLoaded) {
  const uint64_t word[] = {2, 3, 7, ~uint64_t{0}};
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(
            absl::MakeSpan(CreditWord(), kSlotWordBytes), 0,
            {BytesOf(word[0]), BytesOf(word[1]), BytesOf(word[2]), BytesOf(word[3])},
            RacingWriter::Tearing::kWords);
      },
      [&]() -> absl::Status {
        std::unique_ptr<SlotRingSender> sender = NewSender();
        return PollCredits(*sender, {0, word[0], word[1], word[2], word[3]});
      });
  ExpectValidOrDataLoss(tally);
}

// The credit torn byte by byte between 3 and 2^40 + 2: a load may see 2,
// 3, 2^40 + 2 or 2^40 + 3; the last two release unsent messages.
TEST_F(SlotRingRacingTest, ATornCreditIsRefusedOrHonest) {
  const uint64_t high = (uint64_t{1} << 40) + 2;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(absl::MakeSpan(CreditWord(), kSlotWordBytes), 0,
                                      {BytesOf(uint64_t{3}), BytesOf(high)});
      },
      [&]() -> absl::Status {
        std::unique_ptr<SlotRingSender> sender = NewSender();
        return PollCredits(*sender, {0, 2, 3, high, high + 1});
      });
  ExpectValidOrDataLoss(tally);
}

}  // namespace
}  // namespace rdmaflow::onesided
