// The stamped slot against forged stamps and a racing writer: a stamp that
// goes back (even or odd, before the copy or during it) fails the writer
// with kDataLoss for good; one that jumps forward is taken; one that stays
// odd forever is busy forever and harms nothing; a reader racing a writer
// never takes a torn payload; the remote bracket lands whole in a peer's
// memory over a loopback WRITE; sizes that wrap are refused.
#include "onesided/stamped_slot.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMax = ~uint64_t{0};
constexpr size_t kPayload = 64;

TEST(StampedSlotTest, StampsAndLayout) {
  EXPECT_EQ(WritingStamp(1), 1u);
  EXPECT_EQ(WholeStamp(1), 2u);
  EXPECT_EQ(WholeStamp(kMaxSequence), kMax - 1);  // the largest even stamp
  EXPECT_EQ(AlignUp(0), 0u);
  EXPECT_EQ(AlignUp(1), kSlotAlign);
  EXPECT_EQ(AlignUp(kSlotAlign), kSlotAlign);
  EXPECT_EQ(StampedSlot::PackedBytes(1), 2 * kSlotAlign);
  EXPECT_EQ(StampedSlot::PackedBytes(100), 3 * kSlotAlign);
  const StampedSlot slot = StampedSlot::Packed(256, 100);
  EXPECT_EQ(slot.stamp_offset, 256u);
  EXPECT_EQ(slot.payload_offset, 256 + kSlotAlign);
  EXPECT_EQ(slot.payload_bytes, 100u);
  // Rounding up wraps, or the stamp's line on top of it does.
  EXPECT_EQ(AlignUp(kMax), std::nullopt);
  EXPECT_EQ(AlignUp(kMax - 62), std::nullopt);
  EXPECT_EQ(StampedSlot::PackedBytes(kMax - 63), std::nullopt);
  EXPECT_EQ(StampedSlot::PackedBytes(kMax - 127), kMax - 63);
}

TEST(StampedSlotTest, RisingWordFailsForGoodOnceItGoesBack) {
  RisingWord word("rank 7", "its counter", "step ", /*limit=*/100);
  EXPECT_OK(word.Advance(3));
  EXPECT_OK(word.Advance(3));  // staying is fine
  EXPECT_OK(word.Check(50));   // checking does not move it
  EXPECT_EQ(word.last(), 3u);
  EXPECT_THAT(
      word.CheckAfter(60, 59),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("rank 7 broke the protocol: its counter went back "
                         "from step 60 to 59")));
  // For good: even a value that would have been fine is refused now.
  EXPECT_THAT(word.Advance(4),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("60")));
  EXPECT_THAT(word.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(word.last(), 3u);

  RisingWord limited("rank 2", "its header", "version ", kMaxSequence);
  EXPECT_OK(limited.Advance(kMaxSequence));
  RisingWord beyond("rank 2", "its header", "version ", kMaxSequence);
  EXPECT_THAT(beyond.Advance(kMaxSequence + 1),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("says version 9223372036854775808")));
}

// A slot in local memory whose stamp and payload the test forges, as a
// peer's one-sided WRITEs would.
class ForgedSlot {
 public:
  ForgedSlot() : memory_(*StampedSlot::PackedBytes(kPayload)) {}

  // Payload words all `fill`, then the stamp.
  void Forge(uint64_t stamp, uint64_t fill) {
    std::vector<uint64_t> words(kPayload / 8, fill);
    std::memcpy(memory_.data() + slot_.payload_offset, words.data(), kPayload);
    StoreStamp(memory_.data(), slot_.stamp_offset, stamp);
  }

  absl::StatusOr<SlotRead> Read(StampedSlotReader& reader) {
    std::memset(copy_, 0, sizeof(copy_));
    return reader.TryReadLocal(memory_.data(), slot_,
                               reinterpret_cast<std::byte*>(copy_));
  }
  // The first word of the last copy, and whether every word equals it.
  uint64_t copied() const { return copy_[0]; }
  bool whole() const {
    for (uint64_t word : copy_) {
      if (word != copy_[0]) return false;
    }
    return true;
  }

 private:
  std::vector<std::byte> memory_;
  const StampedSlot slot_ = StampedSlot::Packed(0, kPayload);
  uint64_t copy_[kPayload / 8] = {};
};

TEST(StampedSlotTest, ReaderTakesEachNewWholePayloadOnce) {
  ForgedSlot slot;
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  EXPECT_THAT(slot.Read(reader),
              IsOkAndHolds(SlotRead::kUnchanged));  // nothing yet
  slot.Forge(WritingStamp(1), 11);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kBusy));
  slot.Forge(WholeStamp(1), 11);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole));
  EXPECT_EQ(slot.copied(), 11u);
  EXPECT_TRUE(slot.whole());
  EXPECT_EQ(reader.last_whole(), WholeStamp(1));
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kUnchanged));
  EXPECT_OK(reader.status());
}

TEST(StampedSlotTest, StampGoingBackIsDataLossForGood) {
  ForgedSlot slot;
  StampedSlotReader reader("mailbox 'm' of rank 0: rank 1",
                           "the stamp of its slot");
  slot.Forge(8, 4);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole));
  slot.Forge(6, 3);  // an old message replayed
  EXPECT_THAT(
      slot.Read(reader),
      StatusIs(
          absl::StatusCode::kDataLoss,
          HasSubstr("rank 1 broke the protocol: the stamp of its slot went "
                    "back from 8 to 6")));
  slot.Forge(10, 5);  // forward again: too late
  EXPECT_THAT(slot.Read(reader),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("8 to 6")));
  EXPECT_THAT(reader.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(reader.last_whole(), 8u);
}

TEST(StampedSlotTest, OddStampGoingBackIsDataLossNotBusy) {
  ForgedSlot slot;
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  slot.Forge(6, 3);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole));
  slot.Forge(1, 0);
  EXPECT_THAT(slot.Read(reader), StatusIs(absl::StatusCode::kDataLoss,
                                          HasSubstr("went back from 6 to 1")));
}

TEST(StampedSlotTest, StampJumpingForwardIsTaken) {
  // A writer faster than its reader: sequence 1, then 1000, then the
  // largest a stamp can hold.
  ForgedSlot slot;
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  for (uint64_t stamp : {uint64_t{2}, WholeStamp(1000), kMax - 1}) {
    slot.Forge(stamp, stamp);
    EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole)) << stamp;
    EXPECT_EQ(slot.copied(), stamp);
    EXPECT_EQ(reader.last_whole(), stamp);
  }
  EXPECT_OK(reader.status());
}

TEST(StampedSlotTest, OddForeverIsBusyForeverAndHarmless) {
  ForgedSlot slot;
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  slot.Forge(4, 2);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole));
  slot.Forge(kMax, 9);  // the largest stamp is odd: never whole
  for (int i = 0; i < 100; ++i) {
    EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kBusy));
  }
  EXPECT_OK(reader.status());
  EXPECT_EQ(reader.last_whole(), 4u);
  // Below the odd stamp but above the last whole one: not going back.
  slot.Forge(6, 3);
  EXPECT_THAT(slot.Read(reader), IsOkAndHolds(SlotRead::kWhole));
  EXPECT_EQ(slot.copied(), 3u);
}

TEST(StampedSlotTest, StampChangingDuringTheCopy) {
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  int copies = 0;
  auto copy = [&] {
    ++copies;
    return absl::OkStatus();
  };
  // Overwritten while we copied (a higher stamp on reload): busy, and
  // nothing taken.
  EXPECT_THAT(reader.TryRead(4, copy, [] { return uint64_t{5}; }),
              IsOkAndHolds(SlotRead::kBusy));
  EXPECT_EQ(reader.last_whole(), 0u);
  EXPECT_THAT(reader.TryRead(4, copy, [] { return uint64_t{4}; }),
              IsOkAndHolds(SlotRead::kWhole));
  // Lower on reload than on the first load: the stamp went back.
  EXPECT_THAT(reader.TryRead(8, copy, [] { return uint64_t{6}; }),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("went back from 8 to 6")));
  EXPECT_EQ(copies, 3);
  // Failed for good: nothing is copied any more.
  EXPECT_THAT(reader.TryRead(10, copy, [] { return uint64_t{10}; }),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(copies, 3);
}

TEST(StampedSlotTest, ExpectedSequenceTakesOnlyItsOwnStamp) {
  // The versioned buffer's use: the header names the sequence to read.
  StampedSlotReader reader("rank 0", "the stamp of copy 1");
  auto copy = [] { return absl::OkStatus(); };
  EXPECT_THAT(
      reader.TryRead(
          0, copy, [] { return uint64_t{0}; }, 0),
      IsOkAndHolds(SlotRead::kWhole));  // sequence 0: nothing written yet
  EXPECT_THAT(reader.TryRead(
                  WritingStamp(4), copy, [] { return WritingStamp(4); }, 4),
              IsOkAndHolds(SlotRead::kBusy));
  EXPECT_THAT(reader.TryRead(
                  WholeStamp(7), copy, [] { return WholeStamp(7); }, 4),
              IsOkAndHolds(SlotRead::kBusy));  // already overwritten by 7
  EXPECT_THAT(reader.TryRead(
                  WholeStamp(4), copy, [] { return WholeStamp(4); }, 4),
              IsOkAndHolds(SlotRead::kWhole));
  EXPECT_THAT(reader.TryRead(
                  WholeStamp(4), copy, [] { return WholeStamp(4); }, 4),
              IsOkAndHolds(SlotRead::kWhole));  // the same again: still whole
  EXPECT_THAT(reader.TryRead(
                  WholeStamp(1), copy, [] { return WholeStamp(1); }, 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("from 8 to 2")));
}

TEST(StampedSlotTest, CopyAndReloadErrorsAreReturnedNotHeldAgainstTheWriter) {
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  EXPECT_THAT(reader.TryRead(
                  2, [] { return absl::UnavailableError("rank 1 is gone"); },
                  [] { return uint64_t{2}; }),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(reader.TryRead(
                  2, [] { return absl::OkStatus(); },
                  []() -> absl::StatusOr<uint64_t> {
                    return absl::DeadlineExceededError("reload");
                  }),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_OK(reader.status());
  EXPECT_THAT(
      reader.TryRead(
          2, [] { return absl::OkStatus(); }, [] { return uint64_t{2}; }),
      IsOkAndHolds(SlotRead::kWhole));
}

TEST(StampedSlotTest, WriteBracketOrdersItsStepsAndStopsAtAnError) {
  std::vector<std::string> steps;
  EXPECT_OK(WriteBracket(
      3,
      [&](uint64_t stamp) {
        steps.push_back(absl::StrCat("stamp ", stamp));
        return absl::OkStatus();
      },
      [&] {
        steps.push_back("payload");
        return absl::OkStatus();
      }));
  EXPECT_THAT(steps, ::testing::ElementsAre("stamp 5", "payload", "stamp 6"));
  steps.clear();
  EXPECT_THAT(WriteBracket(
                  3,
                  [&](uint64_t stamp) {
                    steps.push_back(absl::StrCat("stamp ", stamp));
                    return absl::OkStatus();
                  },
                  [] { return absl::UnavailableError("peer gone"); }),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(steps,
              ::testing::ElementsAre("stamp 5"));  // never the even stamp
}

// A writer publishing 20,000 payloads without pause while a reader reads
// until it has the last: every payload taken is whole (all its words the
// sequence its stamp names), sequences only go up, and the reader did meet
// the writer mid-write (busy) along the way. The writer starts once the
// reader made its first read; raced again (fresh memory) until the reader
// met it mid-write, which on a loaded machine one race may never do.
TEST(StampedSlotTest, ReaderRacingALocalWriterNeverTakesATornPayload) {
  constexpr size_t kBytes = size_t{4} << 10;
  constexpr uint64_t kWrites = 20000;
  const StampedSlot slot = StampedSlot::Packed(0, kBytes);
  int64_t taken = 0, busy = 0;
  for (int race = 0; race < 20 && busy == 0; ++race) {
    SCOPED_TRACE(absl::StrCat("race ", race));
    std::vector<std::byte> memory(*StampedSlot::PackedBytes(kBytes));
    std::atomic<bool> reading{false};
    std::thread writer([&] {
      while (!reading.load(std::memory_order_acquire)) std::this_thread::yield();
      for (uint64_t s = 1; s <= kWrites; ++s) {
        WriteLocal(memory.data(), slot, s, [&](std::byte* payload) {
          uint64_t* words = reinterpret_cast<uint64_t*>(payload);
          for (size_t w = 0; w < kBytes / 8; ++w) words[w] = s;
        });
      }
    });
    StampedSlotReader reader("the writer thread", "the stamp");
    std::vector<uint64_t> copy(kBytes / 8);
    int64_t torn = 0;
    uint64_t last = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (reader.last_whole() < WholeStamp(kWrites) && absl::Now() < deadline) {
      absl::StatusOr<SlotRead> got =
          reader.TryReadLocal(memory.data(), slot, reinterpret_cast<std::byte*>(copy.data()));
      reading.store(true, std::memory_order_release);
      if (!got.ok()) break;
      if (*got == SlotRead::kBusy) ++busy;
      if (*got != SlotRead::kWhole) continue;
      ++taken;
      const uint64_t sequence = reader.last_whole() / 2;
      for (uint64_t word : copy) torn += word != sequence ? 1 : 0;
      EXPECT_GT(sequence, last);
      last = sequence;
    }
    reading.store(true, std::memory_order_release);  // a reader that broke off early
    writer.join();
    EXPECT_OK(reader.status());
    EXPECT_EQ(reader.last_whole(), WholeStamp(kWrites));
    EXPECT_EQ(torn, 0);
  }
  EXPECT_GT(busy, 0);
  ::testing::Test::RecordProperty("taken", static_cast<int>(taken));
  ::testing::Test::RecordProperty("busy", static_cast<int>(busy));
}

// Rank 1 writes the bracket into a slot of rank 0's region by loopback
// WRITEs; rank 0 reads it whole from its own memory.
TEST(StampedSlotTest, RemoteBracketLandsWholeInThePeersSlot) {
  auto fabric = rdma::loopback::LoopbackFabric::Create();
  std::vector<std::unique_ptr<rdma::loopback::LoopbackTransport>> transports;
  for (int rank = 0; rank < 2; ++rank) {
    rdma::loopback::LoopbackTransportOptions options;
    options.rank = rank;
    options.fabric = fabric;
    ASSERT_OK_AND_ASSIGN(auto transport,
                         rdma::loopback::LoopbackTransport::Create(options));
    transports.push_back(std::move(transport));
  }
  const size_t slot_bytes = *StampedSlot::PackedBytes(kPayload);
  ASSERT_OK_AND_ASSIGN(rdma::MemoryRegion target,
                       transports[0]->Allocate(2 * slot_bytes));
  std::memset(target.data(), 0, target.size());
  ASSERT_OK_AND_ASSIGN(rdma::MemoryRegion staging,
                       transports[1]->Allocate(slot_bytes));
  ASSERT_OK_AND_ASSIGN(auto endpoint,
                       transports[1]->Connect({0, transports[0]->address()}));
  const rdma::RemoteRegion remote = target.descriptor();
  const StampedSlot at =
      StampedSlot::Packed(slot_bytes, kPayload);  // the second slot
  StampedSlotReader reader("rank 1", "the stamp of its slot");
  ProgressLoop loop(*transports[1], ProgressLoopOptions{});  // the writer's
  std::vector<uint64_t> copy(kPayload / 8);
  for (uint64_t s = 1; s <= 3; ++s) {
    std::vector<uint64_t> words(kPayload / 8, 100 + s);
    std::memcpy(staging.data() + kSlotAlign, words.data(), kPayload);
    ASSERT_OK(WriteRemote(loop, *endpoint, staging, remote, at, s,
                          absl::Now() + absl::Seconds(10)));
    EXPECT_EQ(LoadStamp(target.data(), at.stamp_offset), WholeStamp(s));
    EXPECT_THAT(reader.TryReadLocal(target.data(), at,
                                    reinterpret_cast<std::byte*>(copy.data())),
                IsOkAndHolds(SlotRead::kWhole));
    EXPECT_THAT(copy, ::testing::Each(100 + s));
  }
  EXPECT_EQ(LoadStamp(target.data(), 0), 0u);  // the first slot untouched
  // A slot past the end of the peer's region: the transport refuses the
  // first write, and nothing lands.
  const StampedSlot outside = StampedSlot::Packed(2 * slot_bytes, kPayload);
  EXPECT_THAT(WriteRemote(loop, *endpoint, staging, remote, outside,
                          4, absl::Now() + absl::Seconds(10)),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(LoadStamp(target.data(), at.stamp_offset), WholeStamp(3));
}

}  // namespace
}  // namespace rdmaflow::onesided
