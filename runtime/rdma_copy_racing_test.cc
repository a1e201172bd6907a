// File: rdma_copy_racing_test.cc
// rdma_copy's chunk reader against a sender that rewrites its chunk in the
// receiver's message ring while it is read (rdma/testing/racing_writer.h):
// the length word flipping between the header's true length and forged
// ones (past the room, or past the header), the header flipping between
// two honest ones, and random bytes over both. The length word and the
// header are copied once (internal::ReadChunk, what Deliver calls): a
// chunk taken is one the sender wrote whole, its payload starts right
// after the header it was parsed from, and everything else is kDataLoss
// naming the sender.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"
#include "runtime/internal/chunk_reader.h"
#include "runtime/tensor_message.pb.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::rdma::testing::Add;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RaceUntilBothEndings;
using ::rdmaflow::rdma::testing::RacingWriter;

constexpr size_t kChunkBytes = 64;
constexpr size_t kSlotBytes = internal::kChunkHeaderRoom + kChunkBytes;

// The header of a whole float32[4, 4] tensor in one chunk, at `step`.
std::string Header(int64_t step) {
  TensorChunk header;
  header.set_id(1);
  header.set_step(step);
  header.add_shape(4);
  header.add_shape(4);
  header.set_total_bytes(kChunkBytes);
  header.set_offset(0);
  header.set_chunk_bytes(kChunkBytes);
  return header.SerializeAsString();
}

// The length word `length`, then `header`, zero-padded to whole 8-byte
// words (a NIC lands each aligned word whole).
std::vector<std::byte> Image(uint32_t length, const std::string& header) {
  std::vector<std::byte> image((4 + header.size() + 7) / 8 * 8);
  std::memcpy(image.data(), &length, 4);
  std::memcpy(image.data() + 4, header.data(), header.size());
  return image;
}

// A read is short (a header of 20 bytes), so each race runs 20,000 of
// them: a reload a few hundred nanoseconds after the first load then meets
// a changed word many times.
rdma::testing::RaceOptions LongRaces() {
  rdma::testing::RaceOptions options;
  options.min_calls = 20000;
  options.min_writer_rounds = 20000;
  return options;
}

class RdmaCopyRacingTest : public ::testing::Test {
 protected:
  RdmaCopyRacingTest() : storage_(kSlotBytes / 8) {}

  // A ring slot, 8-byte aligned as a registered region is.
  absl::Span<std::byte> Slot() {
    return absl::MakeSpan(reinterpret_cast<std::byte*>(storage_.data()), kSlotBytes);
  }

  // One read as Deliver reads: a taken chunk must be one of `honest`
  // (serialized headers) whole, with its payload right after it; a refusal
  // must name rank 0.
  absl::Status ReadOnce(const std::vector<std::string>& honest) {
    absl::StatusOr<internal::ChunkInSlot> chunk = internal::ReadChunk(0, Slot().data());
    if (!chunk.ok()) {
      if (chunk.status().message().find("from rank 0") == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("a refusal naming no sender: ",
                                                chunk.status().ToString()));
      }
      return chunk.status();
    }
    const std::string got = chunk->header.SerializeAsString();
    for (const std::string& header : honest) {
      if (got != header) continue;
      if (chunk->payload_offset != 4 + header.size()) {
        return absl::InternalError(absl::StrCat("the payload of a ", header.size(),
                                                "-byte header taken at ",
                                                chunk->payload_offset));
      }
      return absl::OkStatus();
    }
    return absl::InternalError(absl::StrCat("took a header no write held whole: ",
                                            chunk->header.ShortDebugString()));
  }

  // What the slot holds before a writer starts (it begins empty: a zero
  // length word, an empty header).
  void Put(const std::vector<std::byte>& image) {
    std::memcpy(Slot().data(), image.data(), image.size());
  }

  std::vector<uint64_t> storage_;
};

// The length word (and the header behind it) flips between the header's
// true length, 600 and 2^32 - 1 (past the 508 bytes of room) and the true
// length + 40 (inside the room, past the header: the zeros behind it do
// not parse). A reader that took the length again for the payload would
// start it somewhere else, or read past the slot.
TEST_F(RdmaCopyRacingTest, ALengthWordFlippingWithForgedOnesIsReadOnce) {
  const std::string header = Header(1);
  const uint32_t length = static_cast<uint32_t>(header.size());
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        Put(Image(length, header));
        return RacingWriter::Flipping(
            Slot(), 0,
            {Image(length, header), Image(600, header), Image(~uint32_t{0}, header),
             Image(length + 40, header)},
            RacingWriter::Tearing::kWords);
      },
      [&] { return ReadOnce({header}); }, 20, LongRaces());
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.ok, 0);
  EXPECT_GT(tally.data_loss, 0);
  RecordProperty("calls", static_cast<int>(tally.calls));
  RecordProperty("refused", static_cast<int>(tally.data_loss));
}

// Two honest headers (steps 1 and 2: one byte apart, in one word) and a
// forged length: every header taken is one of the two, whole.
TEST_F(RdmaCopyRacingTest, AHeaderFlippingBetweenHonestOnesIsTakenWhole) {
  const std::string one = Header(1), two = Header(2);
  ASSERT_EQ(one.size(), two.size());
  const uint32_t length = static_cast<uint32_t>(one.size());
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        Put(Image(length, one));
        return RacingWriter::Flipping(
            Slot(), 0, {Image(length, one), Image(length, two), Image(600, one)},
            RacingWriter::Tearing::kWords);
      },
      [&] { return ReadOnce({one, two}); }, 20, LongRaces());
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.ok, 0);
  EXPECT_GT(tally.data_loss, 0);
}

// Random bytes over the length word and the header: whatever is taken has
// its payload inside the slot's room.
TEST_F(RdmaCopyRacingTest, AScribbledHeaderIsDecodedFromItsCopy) {
  const std::string header = Header(1);
  const std::vector<std::byte> image = Image(static_cast<uint32_t>(header.size()), header);
  RaceTally total;
  for (uint64_t seed = 7; seed < 27 && total.data_loss == 0; ++seed) {
    Put(image);
    auto writer = RacingWriter::Scribbling(Slot(), 0, image.size(), seed);
    Add(total, RaceParse(*writer, [&]() -> absl::Status {
      absl::StatusOr<internal::ChunkInSlot> chunk = internal::ReadChunk(0, Slot().data());
      if (!chunk.ok()) return chunk.status();
      if (chunk->payload_offset > internal::kChunkHeaderRoom) {
        return absl::InternalError(absl::StrCat("payload at ", chunk->payload_offset));
      }
      return absl::OkStatus();
    }));
  }
  EXPECT_EQ(total.other, 0) << total.first_other;
  EXPECT_EQ(total.ok + total.data_loss, total.calls);
  EXPECT_GT(total.data_loss, 0);
}

}  // namespace
}  // namespace rdmaflow::runtime
