// CheckPiece: the only pieces accepted are the ones an honest sender
// writes; every forged header the hardening review found (a piece larger
// than the slot or than what remains, a zero-byte message with payload, a
// continuation of nothing, a new message in the middle of one, a huge
// size) is kDataLoss.
#include "onesided/internal/piece_header.h"

#include <cstdint>
#include <limits>
#include <random>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::onesided::internal {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kSlot = 1024;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(CheckPieceTest, AcceptsWhatAnHonestSenderWrites) {
  EXPECT_THAT(CheckPiece({7, 0, 0, 0}, nullptr, kSlot), IsOk());
  EXPECT_THAT(CheckPiece({7, 100, 0, 100}, nullptr, kSlot), IsOk());
  EXPECT_THAT(CheckPiece({7, 3000, 0, kSlot}, nullptr, kSlot), IsOk());
  PartialMessage current{7, 3000, 2048};
  EXPECT_THAT(CheckPiece({7, 3000, 2048, 3000 - 2048}, &current, kSlot), IsOk());
  // A huge message is valid as such: the receiver decides whether to take
  // it (into a receive that has room, or buffered within its budget).
  EXPECT_THAT(CheckPiece({7, kMax, 0, kSlot}, nullptr, kSlot), IsOk());
}

TEST(CheckPieceTest, RefusesAPieceLargerThanTheSlot) {
  EXPECT_THAT(CheckPiece({7, 1 << 20, 0, 1 << 20}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("larger than a slot")));
  EXPECT_THAT(CheckPiece({7, kMax, 0, kMax}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(CheckPieceTest, RefusesAPieceLargerThanItsMessage) {
  // What overflowed a 100-byte receive before.
  EXPECT_THAT(CheckPiece({7, 100, 0, 1000}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("should have 100 bytes")));
  // Payload in a zero-byte message (written through a null pointer before).
  EXPECT_THAT(CheckPiece({7, 0, 0, 8}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("should have 0 bytes")));
  // A short piece is refused too: the next would start at the wrong offset.
  EXPECT_THAT(CheckPiece({7, 3000, 0, 10}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(CheckPieceTest, RefusesAContinuationOfNothing) {
  EXPECT_THAT(CheckPiece({7, 3000, 1024, kSlot}, nullptr, kSlot),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("continues no message")));
}

TEST(CheckPieceTest, RefusesANewMessageInTheMiddleOfOne) {
  PartialMessage current{7, 3000, 1024};
  EXPECT_THAT(CheckPiece({8, 10, 0, 10}, &current, kSlot),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("new message began")));
}

TEST(CheckPieceTest, RefusesAContinuationThatDoesNotFit) {
  PartialMessage current{7, 3000, 1024};
  // Another tag, another size, a gap, a rewind, a wrapping offset.
  for (PieceHeader h : {PieceHeader{8, 3000, 1024, kSlot}, PieceHeader{7, 4000, 1024, kSlot},
                        PieceHeader{7, 3000, 2048, kSlot}, PieceHeader{7, 3000, 512, kSlot},
                        PieceHeader{7, 3000, kMax - 10, kSlot}}) {
    EXPECT_THAT(CheckPiece(h, &current, kSlot), StatusIs(absl::StatusCode::kDataLoss))
        << h.tag << " " << h.message_bytes << " " << h.offset;
  }
  // The last piece may not run past the message.
  PartialMessage last{7, 3000, 2048};
  EXPECT_THAT(CheckPiece({7, 3000, 2048, kSlot}, &last, kSlot),
              StatusIs(absl::StatusCode::kDataLoss));
}

// Property: a stream of random headers, applied as the receiver applies
// them, never has an accepted piece reach past its message.
TEST(CheckPieceTest, AcceptedRandomPiecesStayInsideTheirMessage) {
  std::mt19937_64 rng(42);
  PartialMessage current;
  bool under_way = false;
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    PieceHeader h;
    // Mostly plausible values, sometimes extreme ones.
    auto pick = [&](uint64_t plausible) {
      switch (rng() % 4) {
        case 0: return kMax - rng() % 3;
        case 1: return uint64_t{0};
        default: return plausible;
      }
    };
    h.tag = rng() % 3;
    h.message_bytes = under_way && rng() % 2 ? current.message_bytes : pick(rng() % 5000);
    h.offset = under_way && rng() % 2 ? current.arrived : pick(rng() % 5000);
    h.bytes = pick(rng() % (2 * kSlot));
    if (!CheckPiece(h, under_way ? &current : nullptr, kSlot).ok()) continue;
    ++accepted;
    ASSERT_LE(h.bytes, kSlot);
    ASSERT_LE(h.offset, h.message_bytes);
    ASSERT_LE(h.bytes, h.message_bytes - h.offset);
    if (h.offset == 0) current = {h.tag, h.message_bytes, 0};
    current.arrived += h.bytes;
    under_way = current.arrived < current.message_bytes;
  }
  EXPECT_GT(accepted, 1000);  // the property was exercised
}

}  // namespace
}  // namespace rdmaflow::onesided::internal
