// File: stamped_slot_racing_test.cc
// The stamped slot's reader against a writer that rewrites the stamp word
// while it is read (rdma/testing/racing_writer.h), with values no honest
// writer leaves in that order: a stamp flipping forward and back (whole
// words, and torn bytes), and one flipping around the sequence a reader
// asks for. Each load of the stamp is checked as loaded: a payload is taken
// only with an even stamp above the last one taken (or exactly the one
// asked for), taken stamps only go up, and a stamp going back is kDataLoss
// quoting the two stamps it compared, for good.
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "onesided/stamped_slot.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RaceUntilBothEndings;
using ::rdmaflow::rdma::testing::RacingWriter;

constexpr size_t kBytes = 256;

// The numbers X and Y of "went back from X to Y", or nullopt.
std::optional<std::pair<uint64_t, uint64_t>> WentBack(absl::string_view message) {
  constexpr absl::string_view kMarker = "went back from ";
  const size_t at = message.find(kMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = message.substr(at + kMarker.size());
  const size_t to = rest.find(" to ");
  if (to == absl::string_view::npos) return std::nullopt;
  absl::string_view second = rest.substr(to + 4);
  second = second.substr(0, second.find(' '));
  uint64_t from = 0, back = 0;
  if (!absl::SimpleAtoi(rest.substr(0, to), &from) || !absl::SimpleAtoi(second, &back)) {
    return std::nullopt;
  }
  return std::make_pair(from, back);
}

// A slot in plain memory (stamp word, then the payload), its stamp rewritten
// by a racing writer.
struct Slot {
  Slot() : memory(*StampedSlot::PackedBytes(kBytes)), at(StampedSlot::Packed(0, kBytes)) {}
  absl::Span<std::byte> StampWord() { return absl::MakeSpan(memory.data(), sizeof(uint64_t)); }

  std::vector<std::byte> memory;  // the stamp word 8-byte aligned (operator new)
  StampedSlot at;
  std::vector<std::byte> copy = std::vector<std::byte>(kBytes);
};

// Reads with one reader until it fails (at most `reads` times), checking
// each answer against the stamps the writer can have left (`written`):
// kWhole only for an even written stamp above the last taken (with
// `sequence`, only WholeStamp(*sequence)); a refusal quotes two written stamps, the second
// below the first, and every later read returns it unchanged.
absl::Status ReadChecked(Slot& slot, const std::set<uint64_t>& written,
                         std::optional<uint64_t> sequence = std::nullopt, int reads = 16) {
  StampedSlotReader reader("the racing writer", "the stamp");
  uint64_t taken = 0;
  for (int read = 0; read < reads; ++read) {
    absl::StatusOr<SlotRead> got =
        sequence.has_value()
            ? reader.TryRead(
                  LoadStamp(slot.memory.data(), 0),
                  [&] {
                    std::memcpy(slot.copy.data(), slot.memory.data() + slot.at.payload_offset,
                                kBytes);
                    return absl::OkStatus();
                  },
                  [&]() -> absl::StatusOr<uint64_t> { return LoadStamp(slot.memory.data(), 0); },
                  sequence)
            : reader.TryReadLocal(slot.memory.data(), slot.at, slot.copy.data());
    if (got.ok()) {
      const uint64_t whole = reader.last_whole();
      if (*got != SlotRead::kWhole) {
        if (whole != taken) return absl::InternalError("a read that took nothing moved the stamp");
        continue;
      }
      // An asked-for sequence may be taken again (a VersionedReader reads
      // the same version twice); any other whole stamp only once.
      const bool again = sequence.has_value() && whole == taken;
      if (whole % 2 != 0 || (whole <= taken && !again) || written.count(whole) == 0 ||
          (sequence.has_value() && whole != WholeStamp(*sequence))) {
        return absl::InternalError(absl::StrCat("took stamp ", whole, " after ", taken));
      }
      taken = whole;
      continue;
    }
    const absl::Status failure = got.status();
    if (failure.code() != absl::StatusCode::kDataLoss) return failure;
    const std::string message(failure.message());
    const auto back = WentBack(message);
    if (!back.has_value() || back->second >= back->first || written.count(back->first) == 0 ||
        written.count(back->second) == 0) {
      return absl::InternalError(absl::StrCat("refused quoting stamps never written: ", message));
    }
    if (message.find("the racing writer") == std::string::npos) {
      return absl::InternalError(absl::StrCat("the refusal names nobody: ", message));
    }
    for (int again = 0; again < 10; ++again) {
      if (reader.TryReadLocal(slot.memory.data(), slot.at, slot.copy.data()).status() != failure ||
          reader.status() != failure) {
        return absl::InternalError(absl::StrCat("a failed reader read again after ", message));
      }
    }
    return failure;
  }
  return absl::OkStatus();
}

void ExpectValidOrDataLoss(const RaceTally& tally) {
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.data_loss, 0);
  ::testing::Test::RecordProperty("calls", static_cast<int>(tally.calls));
  ::testing::Test::RecordProperty("refused", static_cast<int>(tally.data_loss));
  ::testing::Test::RecordProperty("writer_rounds", static_cast<int>(tally.writer_rounds));
}

// Whole words: 4, 5 (writing the next), 6, then 4 again (back).
TEST(StampedSlotRacingTest, AStampFlippingBackIsRefusedAndTakenStampsRise) {
  Slot slot;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(
            slot.StampWord(), 0, {BytesOf(uint64_t{4}), BytesOf(uint64_t{5}), BytesOf(uint64_t{6})},
            RacingWriter::Tearing::kWords);
      },
      [&] {
        return ReadChecked(slot, {0, 4, 5, 6});
      });
  ExpectValidOrDataLoss(tally);
}

// Torn bytes between 2 and 2^40 + 4: a load may see 2, 4, 2^40 + 2 or
// 2^40 + 4, all even; whichever comes after a larger one is refused.
TEST(StampedSlotRacingTest, ATornStampIsTakenRisingOrRefused) {
  Slot slot;
  const uint64_t high = (uint64_t{1} << 40) + 4;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(slot.StampWord(), 0, {BytesOf(uint64_t{2}), BytesOf(high)});
      },
      [&] {
        return ReadChecked(slot, {0, 2, 4, high - 2, high});
      });
  ExpectValidOrDataLoss(tally);
}

// A reader asking for sequence 3 (stamp 6) while the stamp flips between 5,
// 6, 2^64 - 2 (a writer far ahead) and 2: only 6 is taken.
TEST(StampedSlotRacingTest, AnAskedForSequenceTakesOnlyItsOwnStamp) {
  Slot slot;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(slot.StampWord(), 0,
                                      {BytesOf(uint64_t{5}), BytesOf(uint64_t{6}),
                                       BytesOf(~uint64_t{1}), BytesOf(uint64_t{2})},
                                      RacingWriter::Tearing::kWords);
      },
      [&] {
        return ReadChecked(slot, {0, 2, 5, 6, ~uint64_t{1}}, /*sequence=*/3, /*reads=*/4);
      });
  ExpectValidOrDataLoss(tally);
  EXPECT_GT(tally.ok, 0);
}

}  // namespace
}  // namespace rdmaflow::onesided
