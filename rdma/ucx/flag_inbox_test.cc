// File: flag_inbox_test.cc
// The flag inbox's logic over plain memory, as a transport's inbox and its
// writers' mappings would share it: the puts of records are stood in for by
// stores into the ring, as the writer's put would land them.
#include "rdma/ucx/flag_inbox.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shared_word.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::rdma::ucx {
namespace {

using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::RaceOptions;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RacingWriter;
using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

FlagInboxLayout Small(uint32_t lanes = 3, uint32_t slots = 4) {
  FlagInboxLayout layout;
  layout.lanes = lanes;
  layout.slots = slots;
  return layout;
}

// An inbox's memory, 64-byte aligned as ucp_mem_map gives it.
struct Inbox {
  explicit Inbox(const FlagInboxLayout& layout)
      : layout(layout), words(layout.TotalBytes() / 8 + 8, 0) {}
  std::byte* base() {
    auto address = reinterpret_cast<uintptr_t>(words.data());
    return reinterpret_cast<std::byte*>((address + 63) / 64 * 64);
  }
  uint64_t* word(size_t offset) { return reinterpret_cast<uint64_t*>(base() + offset); }

  // What a writer's put of its next record does.
  void Send(FlagLane& lane, uint32_t value) {
    const NotifyRingWriter::Next next = lane.writer().Take(value);
    StoreSharedWord(base() + lane.RecordOffset(next.slot), next.record);
  }

  FlagInboxLayout layout;
  std::vector<uint64_t> words;
};

struct Delivered {
  std::vector<std::pair<int, uint32_t>> got;
  std::vector<uint32_t> refused;
  int Poll(FlagInboxReader& reader) {
    return reader.Poll([&](int rank, uint32_t value) { got.emplace_back(rank, value); },
                       [&](uint32_t lane) { refused.push_back(lane); });
  }
};

TEST(FlagInboxTest, EachWriterGetsALaneAndItsRecordsArriveInOrderWithItsRank) {
  Inbox inbox(Small());
  FlagInboxReader reader(inbox.base(), inbox.layout);
  std::optional<FlagLane> a = FlagLane::Claim(inbox.base(), inbox.layout, 5, 0);
  std::optional<FlagLane> b = FlagLane::Claim(inbox.base(), inbox.layout, 9, 0);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->index(), 0u);
  EXPECT_EQ(b->index(), 1u);
  inbox.Send(*a, 10);
  inbox.Send(*b, 20);
  inbox.Send(*a, 11);
  Delivered d;
  EXPECT_EQ(d.Poll(reader), 3);
  EXPECT_THAT(d.got, ElementsAre(Pair(5, 10), Pair(5, 11), Pair(9, 20)));
  EXPECT_EQ(reader.claimed(), 2u);
  EXPECT_EQ(d.Poll(reader), 0);  // Nothing twice.
}

TEST(FlagInboxTest, ALaneFillsAndThePublishedConsumedCountMakesRoom) {
  Inbox inbox(Small(/*lanes=*/1, /*slots=*/4));
  FlagInboxReader reader(inbox.base(), inbox.layout);
  std::optional<FlagLane> lane = FlagLane::Claim(inbox.base(), inbox.layout, 1, 0);
  ASSERT_TRUE(lane.has_value());
  for (uint32_t v = 0; v < 4; ++v) {
    ASSERT_THAT(lane->writer().HasRoom(), IsOkAndHolds(true));
    inbox.Send(*lane, v);
  }
  EXPECT_THAT(lane->writer().HasRoom(), IsOkAndHolds(false));
  Delivered d;
  EXPECT_EQ(d.Poll(reader), 4);
  EXPECT_EQ(LoadSharedWord(inbox.word(inbox.layout.ConsumedOffset(0))), 4u);
  EXPECT_THAT(lane->writer().HasRoom(), IsOkAndHolds(true));
  inbox.Send(*lane, 99);  // Lap two, slot 0.
  EXPECT_EQ(d.Poll(reader), 1);
  EXPECT_EQ(d.got.back(), std::make_pair(1, 99u));
}

TEST(FlagInboxTest, WritersBeyondTheLanesGetNoneAndAForgedCounterIsClamped) {
  Inbox inbox(Small(/*lanes=*/2));
  FlagInboxReader reader(inbox.base(), inbox.layout);
  ASSERT_TRUE(FlagLane::Claim(inbox.base(), inbox.layout, 0, 0).has_value());
  ASSERT_TRUE(FlagLane::Claim(inbox.base(), inbox.layout, 1, 0).has_value());
  EXPECT_FALSE(FlagLane::Claim(inbox.base(), inbox.layout, 2, 0).has_value());
  // A peer that writes a huge count: the reader polls the lanes there are.
  StoreSharedWord(inbox.word(0), ~uint64_t{0});
  Delivered d;
  EXPECT_EQ(d.Poll(reader), 0);
  EXPECT_EQ(reader.claimed(), 2u);
}

TEST(FlagInboxTest, ALaneIsReadOnlyOnceItsOwnerIsOursAndOneNamingNoRankIsRefused) {
  Inbox inbox(Small());
  FlagInboxReader reader(inbox.base(), inbox.layout);
  // Claimed, owner not written yet: a record already there waits.
  StoreSharedWord(inbox.word(0), 1);
  StoreSharedWord(inbox.word(inbox.layout.RingOffset(0)), NotifyRecord(1, 7));
  Delivered d;
  EXPECT_EQ(d.Poll(reader), 0);
  StoreSharedWord(inbox.word(inbox.layout.OwnerOffset(0)),
                  (FlagInboxLayout::kOwnerMagic << 32) | 3);
  EXPECT_EQ(d.Poll(reader), 1);
  EXPECT_THAT(d.got, ElementsAre(Pair(3, 7u)));
  // Rewriting the owner afterwards changes nothing: it was read once.
  StoreSharedWord(inbox.word(inbox.layout.OwnerOffset(0)),
                  (FlagInboxLayout::kOwnerMagic << 32) | 8);
  StoreSharedWord(inbox.word(inbox.layout.RingOffset(0) + 8), NotifyRecord(2, 9));
  EXPECT_EQ(d.Poll(reader), 1);
  EXPECT_EQ(d.got.back(), std::make_pair(3, 9u));

  // A lane whose owner names no rank (above INT_MAX) is refused for good.
  StoreSharedWord(inbox.word(0), 2);
  StoreSharedWord(inbox.word(inbox.layout.OwnerOffset(1)),
                  (FlagInboxLayout::kOwnerMagic << 32) | 0x80000000u);
  StoreSharedWord(inbox.word(inbox.layout.RingOffset(1)), NotifyRecord(1, 5));
  EXPECT_EQ(d.Poll(reader), 0);
  EXPECT_EQ(d.Poll(reader), 0);
  EXPECT_THAT(d.refused, ElementsAre(1u));
}

TEST(FlagInboxTest, ForgedRecordsAndConsumedCountsAreRefused) {
  Inbox inbox(Small(/*lanes=*/1, /*slots=*/4));
  FlagInboxReader reader(inbox.base(), inbox.layout);
  std::optional<FlagLane> lane = FlagLane::Claim(inbox.base(), inbox.layout, 1, 6);
  ASSERT_TRUE(lane.has_value());
  // A record of a later lap, or all ones, is never taken for the next one.
  for (uint64_t forged : {NotifyRecord(5, 1), ~uint64_t{0}, NotifyRecord(0, 3)}) {
    StoreSharedWord(inbox.word(inbox.layout.RingOffset(0)), forged);
    Delivered d;
    EXPECT_EQ(d.Poll(reader), 0) << forged;
  }
  // The target says it consumed more than was posted: kDataLoss naming it.
  for (int i = 0; i < 4; ++i) inbox.Send(*lane, i);
  StoreSharedWord(inbox.word(inbox.layout.ConsumedOffset(0)), 9);
  EXPECT_THAT(lane->writer().HasRoom(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 6")));
}

TEST(FlagInboxTest, AnnouncedLayoutsAreChecked) {
  const FlagInboxLayout good;
  EXPECT_OK(FlagInboxLayout::Validate(good.lanes, good.slots, good.TotalBytes(), 2).status());
  EXPECT_THAT(FlagInboxLayout::Validate(0, 512, 1 << 20, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
  EXPECT_THAT(FlagInboxLayout::Validate(FlagInboxLayout::kMaxLanes + 1, 512, 1u << 31, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FlagInboxLayout::Validate(4, 500, 1 << 20, 2),  // not a power of two
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FlagInboxLayout::Validate(4, 512, good.LaneBytes(), 2),  // region too small
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
}

// The owner word rewritten between valid and invalid while the reader
// first reads it: the lane is delivered under the rank it read (3) or
// refused, never with a rank read from a second load.
TEST(FlagInboxTest, AnOwnerWordRewrittenWhileItIsReadIsReadOnce) {
  const FlagInboxLayout layout = Small(/*lanes=*/1, /*slots=*/4);
  Inbox inbox(layout);
  StoreSharedWord(inbox.word(0), 1);
  StoreSharedWord(inbox.word(layout.RingOffset(0)), NotifyRecord(1, 42));
  auto owner = RacingWriter::Flipping(
      absl::MakeSpan(inbox.base(), layout.TotalBytes()), layout.OwnerOffset(0),
      {BytesOf((FlagInboxLayout::kOwnerMagic << 32) | 3),
       BytesOf((FlagInboxLayout::kOwnerMagic << 32) | 0xffffffffu), BytesOf(uint64_t{0})},
      RacingWriter::Tearing::kWords);
  RaceOptions options;
  options.min_calls = 50000;
  options.min_writer_rounds = 50000;
  int64_t delivered = 0;
  const RaceTally tally = RaceParse(*owner, [&]() -> absl::Status {
    FlagInboxReader fresh(inbox.base(), layout);
    absl::Status status;
    int refused = 0;
    const int got = fresh.Poll(
        [&](int rank, uint32_t value) {
          ++delivered;
          if (rank != 3 || value != 42) {
            status = absl::InternalError(absl::StrCat("delivered ", value, " from rank ", rank));
          }
        },
        [&](uint32_t) { ++refused; });
    if (got > 1 || got + refused > 1) {
      status = absl::InternalError(absl::StrCat(got, " delivered, ", refused, " refused"));
    }
    return status;
  }, options);
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  RecordProperty("records_delivered", static_cast<int>(delivered));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
