// File: racing_decode_test.cc
// The codecs' decoders against a peer that rewrites its message while it is
// decoded (rdma/testing/racing_writer.h): the sparse message (an
// all-gathered one, and a parameter server's codec push in its padded
// slot) and int8's agreed scales. Every call must end in a valid result or
// kDataLoss; an index or scale re-read after its check would write outside
// the tensor (AddressSanitizer, or a fault) or decode inf.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec.h"
#include "compression/sparse_message.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::compression {
namespace {

using rdma::testing::BytesOf;
using rdma::testing::RaceParse;
using rdma::testing::RaceTally;
using rdma::testing::RacingWriter;

constexpr size_t kElements = 64;
constexpr size_t kPairs = 16;

std::vector<std::byte> HonestMessage(uint64_t step, size_t padding = 0) {
  std::vector<uint32_t> indices;
  for (uint32_t i = 0; i < kPairs; ++i) indices.push_back(i * 4);
  std::vector<float> source(kElements, 0.5f);
  std::vector<std::byte> m(SparseMessageBytes(kPairs) + padding);
  WriteSparseMessage(step, indices, source, absl::MakeSpan(m));
  return m;
}

// Whose values a decode may add. The decoders check indices, counts and
// scales, never a value: any bit pattern is a float, and a NaN or infinity a
// peer sends is its own gradient's (AMP's loss scaler must see it).
enum class Values {
  kHonest,      // the racing writer leaves every value alone: the sum is finite
  kPeerChosen,  // the writer scribbles values too: any float may land
};

// A decode into a tensor of exactly kElements (so AddressSanitizer sees a
// write past it); with honest values its result must also be finite.
absl::Status DecodeChecked(const std::function<absl::Status(absl::Span<float>)>& decode,
                           Values values = Values::kHonest) {
  auto out = std::make_unique<float[]>(kElements);
  std::fill(out.get(), out.get() + kElements, 0.0f);
  absl::Status status = decode(absl::MakeSpan(out.get(), kElements));
  if (!status.ok() || values == Values::kPeerChosen) return status;
  for (size_t i = 0; i < kElements; ++i) {
    if (!std::isfinite(out[i])) {
      return absl::InternalError(absl::StrCat("decoded element ", i, " is ", out[i]));
    }
  }
  return absl::OkStatus();
}

void ExpectOnlyValidEndings(const RaceTally& tally) {
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.calls, 0);
  ::testing::Test::RecordProperty("calls", static_cast<int>(tally.calls));
  ::testing::Test::RecordProperty("refused", static_cast<int>(tally.data_loss));
  ::testing::Test::RecordProperty("writer_rounds", static_cast<int>(tally.writer_rounds));
}

// One index flips between an honest value and one 4 GiB past the tensor:
// a decoder that checks its copy but adds through a second read writes there.
TEST(RacingDecodeTest, SparseMessageIndexFlippedBetweenCheckAndUse) {
  std::vector<std::byte> message = HonestMessage(3);
  const size_t index_at = kSparseHeaderBytes + 5 * sizeof(uint32_t);
  uint32_t honest = 0;
  std::memcpy(&honest, message.data() + index_at, sizeof(honest));
  auto writer = RacingWriter::Flipping(absl::MakeSpan(message), index_at,
                                       {BytesOf(honest), BytesOf(uint32_t{0x40000000})});
  const RaceTally tally = RaceParse(*writer, [&] {
    return DecodeChecked([&](absl::Span<float> out) {
      return AddSparseMessage(message, 3, kPairs, 1, out, 1.0f);
    });
  });
  ExpectOnlyValidEndings(tally);
}

// The pair count flips between honest and the most the codec allows, in a
// message padded to its slot as a parameter server's push is.
TEST(RacingDecodeTest, PaddedPushPairCountFlipped) {
  auto codec = CreateCodec("topk:ratio=0.25", CodecContext{0, 1, 7}, kElements);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const size_t cap = kElements / 4;
  std::vector<std::byte> slot((*codec)->scratch_bytes() + 64);
  std::vector<float> gradient(kElements);
  for (size_t i = 0; i < kElements; ++i) gradient[i] = static_cast<float>(i % 7) - 3.0f;
  ASSERT_TRUE((*codec)->EncodeMessage(gradient, 0, absl::MakeSpan(slot)).ok());
  auto writer = RacingWriter::Flipping(absl::MakeSpan(slot), 4,
                                       {BytesOf(uint32_t{2}), BytesOf(uint32_t(cap))});
  const RaceTally tally = RaceParse(*writer, [&] {
    return DecodeChecked([&](absl::Span<float> out) {
      return (*codec)->AddMessage(slot, 0, 1, out, 1.0f);
    });
  });
  ExpectOnlyValidEndings(tally);
}

// A parameter server's codec push in its receive slot (what PsStrategy's
// TakeGradient hands the codec's AddMessage) while its step flips between
// the one the server expects and the next (one byte apart: every state of
// the word is one of the two). A push taken adds exactly what the honest
// push adds; one refused is kDataLoss and leaves `out` untouched. Raced
// again until both were seen (a writer may start late on a loaded machine).
TEST(RacingDecodeTest, PsPushStepFlippedInItsSlot) {
  auto codec = CreateCodec("topk:ratio=0.25", CodecContext{0, 1, 7}, kElements);
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::vector<std::byte> slot((*codec)->scratch_bytes() + 64);
  std::vector<float> gradient(kElements);
  for (size_t i = 0; i < kElements; ++i) gradient[i] = static_cast<float>(i % 7) - 3.0f;
  ASSERT_TRUE((*codec)->EncodeMessage(gradient, 5, absl::MakeSpan(slot)).ok());
  std::vector<float> honest(kElements, 0.0f);
  ASSERT_TRUE((*codec)->AddMessage(slot, 5, 1, absl::MakeSpan(honest), 1.0f).ok());
  RaceTally total;
  for (int race = 0; race < 20 && (total.ok == 0 || total.data_loss == 0); ++race) {
    auto writer = RacingWriter::Flipping(absl::MakeSpan(slot), 8,
                                         {BytesOf(uint64_t{5}), BytesOf(uint64_t{6})});
    const RaceTally tally = RaceParse(*writer, [&]() -> absl::Status {
      auto out = std::make_unique<float[]>(kElements);
      std::fill(out.get(), out.get() + kElements, 0.0f);
      absl::Status status =
          (*codec)->AddMessage(slot, 5, 1, absl::MakeSpan(out.get(), kElements), 1.0f);
      if (status.ok()) {
        if (!std::equal(honest.begin(), honest.end(), out.get())) {
          return absl::InternalError("a push taken adds what the honest push does not");
        }
        return status;
      }
      for (size_t i = 0; i < kElements; ++i) {
        if (out[i] != 0.0f) {
          return absl::InternalError(absl::StrCat("a refused push changed element ", i));
        }
      }
      return status;
    });
    total.calls += tally.calls;
    total.ok += tally.ok;
    total.data_loss += tally.data_loss;
    if (total.other == 0) total.first_other = tally.first_other;
    total.other += tally.other;
  }
  ExpectOnlyValidEndings(total);
  EXPECT_GT(total.ok, 0);
  EXPECT_GT(total.data_loss, 0);
}

// Random bytes anywhere in the message, header included. A scribbled value
// may be NaN or infinite, which the decoder adds as it is: only where the
// additions land is checked (inside the tensor of exactly kElements, by
// AddressSanitizer or a fault), not what they add.
TEST(RacingDecodeTest, SparseMessageScribbled) {
  std::vector<std::byte> message = HonestMessage(9, /*padding=*/32);
  auto writer = RacingWriter::Scribbling(absl::MakeSpan(message), 0, message.size(), 11);
  const RaceTally tally = RaceParse(*writer, [&] {
    return DecodeChecked(
        [&](absl::Span<float> out) {
          return AddSparseMessage(message, 9, kPairs, 1, out, 1.0f, SparseFit::kPadded);
        },
        Values::kPeerChosen);
  });
  ExpectOnlyValidEndings(tally);
}

// int8's agreed scale of bucket 0 flips between a valid one and infinity
// in the memory the all-reduce left it in: checked once, it must not be
// used as infinity in quantizing or decoding.
TEST(RacingDecodeTest, Int8AgreedScaleFlipped) {
  auto codec = CreateCodec("int8:bucket=16", CodecContext{0, 1, 5}, kElements);
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::vector<std::byte> scratch((*codec)->scratch_bytes());
  std::vector<float> gradient(kElements, 0.25f);
  auto writer = RacingWriter::Flipping(absl::MakeSpan(scratch), 0,
                                       {BytesOf(1.0f), BytesOf(INFINITY)});
  uint64_t step = 0;
  const RaceTally tally = RaceParse(*writer, [&] {
    return DecodeChecked([&](absl::Span<float> out) -> absl::Status {
      auto round = (*codec)->Begin(gradient, step++, absl::MakeSpan(scratch));
      if (!round.ok()) return round.status();
      for (;;) {
        auto next = (*codec)->Next(absl::MakeSpan(scratch), {}, out, 1.0f);
        if (!next.ok()) return next.status();
        if (!next->has_value()) return absl::OkStatus();
      }
    });
  });
  ExpectOnlyValidEndings(tally);
}

}  // namespace
}  // namespace rdmaflow::compression
