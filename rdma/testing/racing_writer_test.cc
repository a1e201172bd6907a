// File: testing/racing_writer_test.cc
// The racing writer itself: it changes the bytes it was given between two
// reads of a parser, and never a byte outside its window.
#include "rdma/testing/racing_writer.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::testing {
namespace {

uint32_t Load32(const std::vector<std::byte>& region, size_t offset) {
  uint32_t v = 0;
  std::memcpy(&v, region.data() + offset, sizeof(v));
  return v;
}

// Waits (bounded) until `writer` has rewritten at least `rounds` more times.
bool WaitRounds(const RacingWriter& writer, uint64_t rounds) {
  const uint64_t target = writer.rounds() + rounds;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (writer.rounds() < target) {
    if (absl::Now() > give_up) return false;
  }
  return true;
}

TEST(RacingWriterTest, FlippingChangesAFieldBetweenACheckAndAUse) {
  std::vector<std::byte> region(32, std::byte{0});
  auto writer = RacingWriter::Flipping(absl::MakeSpan(region), 8,
                                       {BytesOf(uint32_t{7}), BytesOf(uint32_t{0xdead})});
  // A parser that reads its field twice (the fault the suite exists for),
  // letting the writer run between the two reads.
  int changed = 0;
  for (int i = 0; i < 50; ++i) {
    const uint32_t checked = Load32(region, 8);
    ASSERT_TRUE(WaitRounds(*writer, 1 + i % 2)) << "the writer made no progress in 30 s";
    const uint32_t used = Load32(region, 8);
    // Bytes land one by one, as DMA may tear a word: each byte is one of
    // an image's, or the zero it started as.
    for (uint32_t v : {checked, used}) {
      for (int byte = 0; byte < 4; ++byte) {
        const uint32_t b = (v >> (8 * byte)) & 0xff;
        EXPECT_TRUE(b == ((7u >> (8 * byte)) & 0xff) || b == ((0xdeadu >> (8 * byte)) & 0xff) ||
                    b == 0)
            << "byte " << byte << " of " << v << " is in no image";
      }
    }
    if (checked != used) ++changed;
  }
  writer->Stop();
  EXPECT_GT(changed, 0);
  for (size_t i = 0; i < region.size(); ++i) {
    if (i < 8 || i >= 12) EXPECT_EQ(region[i], std::byte{0}) << "byte " << i;
  }
}

TEST(RacingWriterTest, ScribblingStaysInItsWindowAndChangesIt) {
  std::vector<std::byte> region(256, std::byte{0x5a});
  auto writer = RacingWriter::Scribbling(absl::MakeSpan(region), 64, 64, /*seed=*/1);
  ASSERT_TRUE(WaitRounds(*writer, 1000)) << "the writer made no progress in 30 s";
  writer->Stop();
  int changed = 0;
  for (size_t i = 0; i < region.size(); ++i) {
    if (i < 64 || i >= 128) {
      EXPECT_EQ(region[i], std::byte{0x5a}) << "byte " << i << " is outside the window";
    } else if (region[i] != std::byte{0x5a}) {
      ++changed;
    }
  }
  EXPECT_GT(changed, 32);
}

TEST(RacingWriterTest, RaceParseCountsEveryEnding) {
  std::vector<std::byte> region(8, std::byte{0});
  auto writer = RacingWriter::Flipping(absl::MakeSpan(region), 0,
                                       {BytesOf(uint32_t{1}), BytesOf(uint32_t{2})});
  int64_t call = 0;
  RaceOptions options;
  options.min_calls = 300;
  options.min_writer_rounds = 10;
  const RaceTally tally = RaceParse(
      *writer,
      [&]() -> absl::Status {
        switch (call++ % 3) {
          case 0:
            return absl::OkStatus();
          case 1:
            return absl::DataLossError("refused");
          default:
            return absl::InternalError("a parser bug");
        }
      },
      options);
  EXPECT_EQ(tally.calls, call);
  EXPECT_GE(tally.calls, 300);
  EXPECT_EQ(tally.ok + tally.data_loss + tally.other, tally.calls);
  EXPECT_EQ(tally.ok, (tally.calls + 2) / 3);
  EXPECT_EQ(tally.first_other.code(), absl::StatusCode::kInternal);
  EXPECT_GE(tally.writer_rounds, 10u);
}

}  // namespace
}  // namespace rdmaflow::rdma::testing
