// File: notify_ring_test.cc
// The flag-notification ring's logic over plain memory: the transport's
// writes are stood in for by stores of the records and credits.
#include "rdma/internal/notify_ring.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::RaceOptions;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RacingWriter;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// One ring and its credit word, as two hosts would hold them.
struct Pair {
  explicit Pair(uint32_t slots)
      : ring(slots, 0), reader(ring.data(), slots), writer(&credit, slots, 7) {}

  // What the sender's chain does: the record into the peer's slot.
  void Send(uint32_t value) {
    const NotifyRingWriter::Next next = writer.Take(value);
    ring[next.slot] = next.record;
  }
  std::vector<uint32_t> Receive() {
    std::vector<uint32_t> got;
    reader.Poll([&](uint32_t v) { got.push_back(v); });
    if (auto due = reader.CreditDue()) {
      credit = *due;
      reader.CreditSent(*due);
    }
    return got;
  }

  uint64_t credit = 0;
  std::vector<uint64_t> ring;
  NotifyRingReader reader;
  NotifyRingWriter writer;
};

TEST(NotifyRingTest, RecordsArriveOnceAndInOrder) {
  Pair p(8);
  EXPECT_TRUE(p.Receive().empty());
  for (uint32_t v : {10u, 11u, 12u}) {
    ASSERT_OK_AND_ASSIGN(bool room, p.writer.HasRoom());
    ASSERT_TRUE(room);
    p.Send(v);
  }
  EXPECT_EQ(p.Receive(), (std::vector<uint32_t>{10, 11, 12}));
  EXPECT_TRUE(p.Receive().empty()) << "a record must be delivered once";
  EXPECT_EQ(p.reader.consumed(), 3u);
}

TEST(NotifyRingTest, ALaterRecordWaitsForTheOneBeforeIt) {
  Pair p(8);
  const NotifyRingWriter::Next first = p.writer.Take(1);
  const NotifyRingWriter::Next second = p.writer.Take(2);
  p.ring[second.slot] = second.record;  // Landed first (another path).
  EXPECT_TRUE(p.Receive().empty());
  p.ring[first.slot] = first.record;
  EXPECT_EQ(p.Receive(), (std::vector<uint32_t>{1, 2}));
}

TEST(NotifyRingTest, TheRingFillsAndCreditsMakeRoom) {
  Pair p(4);
  for (uint32_t v = 0; v < 4; ++v) {
    ASSERT_OK_AND_ASSIGN(bool room, p.writer.HasRoom());
    ASSERT_TRUE(room) << v;
    p.Send(v);
  }
  ASSERT_OK_AND_ASSIGN(bool full, p.writer.HasRoom());
  EXPECT_FALSE(full) << "a fifth record would overwrite an unread one";
  EXPECT_EQ(p.Receive().size(), 4u);  // Credit: 4 consumed.
  EXPECT_EQ(p.credit, 4u);
  ASSERT_OK_AND_ASSIGN(bool room, p.writer.HasRoom());
  EXPECT_TRUE(room);
  // Many laps: an earlier lap's record in a slot is never taken for new.
  for (uint32_t v = 100; v < 140; ++v) {
    ASSERT_OK_AND_ASSIGN(bool ok, p.writer.HasRoom());
    ASSERT_TRUE(ok);
    p.Send(v);
    ASSERT_EQ(p.Receive(), std::vector<uint32_t>{v});
  }
}

TEST(NotifyRingTest, CreditsAreDueEveryQuarterRing) {
  Pair p(16);
  for (uint32_t v = 0; v < 3; ++v) p.Send(v);
  p.Receive();
  EXPECT_EQ(p.credit, 0u) << "3 of 16 consumed: not yet";
  p.Send(3);
  p.Receive();
  EXPECT_EQ(p.credit, 4u);
}

TEST(NotifyRingTest, AForgedCreditIsDataLoss) {
  Pair p(4);
  for (uint32_t v = 0; v < 4; ++v) p.Send(v);
  p.credit = 5;  // More than was ever posted.
  EXPECT_THAT(p.writer.HasRoom(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("rank 7 says it consumed 5")));
  Pair q(4);
  for (uint32_t v = 0; v < 4; ++v) q.Send(v);
  q.credit = 4;
  ASSERT_OK_AND_ASSIGN(bool room, q.writer.HasRoom());
  EXPECT_TRUE(room);
  for (uint32_t v = 0; v < 4; ++v) q.Send(v);
  q.credit = 2;  // Going back.
  EXPECT_THAT(q.writer.HasRoom(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(NotifyRingTest, AForgedOrStaleRecordIsNotDelivered) {
  Pair p(8);
  p.ring[0] = NotifyRecord(9, 5);  // A record of the second lap, early.
  EXPECT_TRUE(p.Receive().empty());
  p.ring[0] = NotifyRecord(0, 5);  // Tag 0: never a live record.
  EXPECT_TRUE(p.Receive().empty());
}

TEST(NotifyRingTest, TagsWrapAtTwoToTheThirtyTwo) {
  const uint64_t seq = (uint64_t{1} << 32) + 5;
  EXPECT_EQ(NotifyRecord(seq, 0xabcd) >> 32, 5u);
  EXPECT_EQ(NotifyRecord(seq, 0xabcd) & 0xffffffffu, 0xabcdu);
}

TEST(NotifyRingTest, AnnouncedRingsAreChecked) {
  EXPECT_OK(ValidateNotifyRing(0x1000, 256, 3));
  EXPECT_THAT(ValidateNotifyRing(0x1000, 0, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 3 announced a notification ring of 0")));
  EXPECT_THAT(ValidateNotifyRing(0x1000, 100, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateNotifyRing(0x1000, kMaxNotifySlots * 2, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateNotifyRing(0x1004, 256, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("8-byte aligned")));
  EXPECT_THAT(ValidateNotifyRing(~uint64_t{0} - 15, 256, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateNotifyRing(0, 256, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A peer rewriting a ring slot while the reader polls it (the record of
// notification 1 flipping with records of other laps and garbage, each
// 8-byte record landing whole, as a NIC's aligned inline write does), and
// its credit word while the writer reads it (an honest count flipping with
// one above what was posted, bytes torn between them): each record is
// loaded once, so a poll delivers notification 1 with the value written
// with its tag (a reader that took the tag from one load and the value
// from another would deliver 5 or 0), or nothing; and the credit gives
// room, none, or kDataLoss.
TEST(NotifyRingTest, RecordsAndCreditsRewrittenWhileTheyAreRead) {
  std::vector<uint64_t> ring(8, 0);
  auto records = RacingWriter::Flipping(
      absl::MakeSpan(reinterpret_cast<std::byte*>(ring.data()), 8 * sizeof(uint64_t)), 0,
      {BytesOf(NotifyRecord(9, 5)), BytesOf(NotifyRecord(1, 42)), BytesOf(~uint64_t{0}),
       BytesOf(uint64_t{0})},
      RacingWriter::Tearing::kWords);
  int64_t delivered = 0;
  RaceOptions options;
  options.min_calls = 5000;
  options.min_writer_rounds = 5000;
  const RaceTally read = RaceParse(*records, [&]() -> absl::Status {
    NotifyRingReader fresh(ring.data(), 8);  // always waiting for notification 1
    absl::Status status;
    const int got = fresh.Poll([&](uint32_t value) {
      ++delivered;
      if (value != 42) status = absl::InternalError(absl::StrCat("delivered value ", value));
    });
    if (got > 1) status = absl::InternalError(absl::StrCat("one slot delivered ", got));
    return status;
  }, options);
  EXPECT_EQ(read.other, 0) << read.first_other;

  uint64_t credit = 0;
  auto credits = RacingWriter::Flipping(
      absl::MakeSpan(reinterpret_cast<std::byte*>(&credit), sizeof(credit)), 0,
      {BytesOf(uint64_t{4}), BytesOf(uint64_t{1} << 40)});
  const RaceTally said = RaceParse(*credits, [&]() -> absl::Status {
    NotifyRingWriter writer(&credit, 4, 7);
    for (int i = 0; i < 4; ++i) writer.Take(1);  // the ring full: the credit is read
    // Room (a count of 4), none (a torn count of 0: nothing consumed yet)
    // or kDataLoss (a count above the 4 posted).
    return writer.HasRoom().status();
  }, options);
  EXPECT_EQ(said.other, 0) << said.first_other;
  RecordProperty("records_delivered", static_cast<int>(delivered));
  RecordProperty("credits_refused", static_cast<int>(said.data_loss));
}

}  // namespace
}  // namespace rdmaflow::rdma
