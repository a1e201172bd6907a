// File: staging_test.cc
// The staged path's peer-written words (rdma/device/staging.h), forged and
// racing: chunk headers (another sequence, lengths of 0 or past a slot, a
// header caught half written, one rewritten while it is read), read
// requests (another sequence, nothing or too much asked, torn, void),
// directory entries (absent, oversized, garbage, torn, rewritten while
// read, another rank's or kind's region), and the device ranges a chunk
// may land in (edges, sums that would wrap).
#include "rdma/device/staging.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// As many reads as the loops these races replaced made, after the writer
// first ran.
testing::RaceOptions Long() {
  testing::RaceOptions options;
  options.min_calls = 20000;
  return options;
}

constexpr size_t kSlots = 4;

// OK, and nothing there yet.
template <typename T>
bool Absent(const absl::StatusOr<std::optional<T>>& read) {
  return read.ok() && !read->has_value();
}
constexpr size_t kSlotBytes = 64 << 10;

std::vector<std::byte> Header(uint64_t sequence, uint64_t address, uint64_t length,
                              bool checked = true, uint64_t request = 0) {
  ChunkHeader header{sequence, address, length, request,
                     checked ? HeaderCheck(sequence, address, length, request) : 12345};
  std::vector<std::byte> bytes(staging_layout::kHeaderBytes);
  EncodeHeader(header, bytes.data());
  return bytes;
}

absl::StatusOr<std::optional<ChunkHeader>> Read(const std::vector<std::byte>& bytes,
                                                uint64_t expected) {
  return ReadHeader(bytes.data(), expected, kSlots, kSlotBytes, 3);
}

TEST(StagingHeaderTest, TheExpectedChunkIsRead) {
  ASSERT_OK_AND_ASSIGN(std::optional<ChunkHeader> header, Read(Header(6, 0x1000, 77), 6));
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->address, 0x1000u);
  EXPECT_EQ(header->length, 77u);
}

// A cancelled write's chunk, and the empty answer to a void read request:
// a header alone, nothing to land (whether the request named is one that
// may take it is the link's check, CheckLanding).
TEST(StagingHeaderTest, AVoidChunkIsReadAndCarriesNothing) {
  ASSERT_OK_AND_ASSIGN(std::optional<ChunkHeader> header, Read(Header(6, 0, 0), 6));
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->length, 0u);
  EXPECT_EQ(header->address, 0u);
  ASSERT_OK_AND_ASSIGN(header, Read(Header(6, 0, 0, /*checked=*/true, /*request=*/2), 6));
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->length, 0u);
  EXPECT_EQ(header->request, 2u);
  // A length of 0 to an address is forged, answer or not.
  EXPECT_THAT(Read(Header(6, 0x1000, 0), 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("claims 0 bytes")));
  EXPECT_THAT(Read(Header(6, 0x1000, 0, /*checked=*/true, /*request=*/2), 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("claims 0 bytes")));
}

TEST(StagingHeaderTest, AnOlderOrHalfWrittenHeaderIsNotThereYet) {
  // The slot's previous chunk (6 - 4), an empty slot, a header whose check
  // does not match (caught half written).
  EXPECT_TRUE(Absent(Read(Header(2, 0x1000, 77), 6)));
  EXPECT_TRUE(Absent(Read(Header(0, 0, 0, false), 1)));
  EXPECT_TRUE(Absent(Read(Header(6, 0x1000, 77, false), 6)));
}

TEST(StagingHeaderTest, ForgedHeadersAreDataLossNamingThePeer) {
  EXPECT_THAT(Read(Header(10, 0x1000, 77), 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 3 wrote chunk 10")));
  EXPECT_THAT(Read(Header(1, 0x1000, 77), 6), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(Read(Header(6, 0x1000, 0), 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("claims 0 bytes")));
  EXPECT_THAT(Read(Header(6, 0x1000, kSlotBytes + 1), 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("in a slot of")));
  EXPECT_THAT(Read(Header(6, 0x1000, std::numeric_limits<uint64_t>::max()), 6),
              StatusIs(absl::StatusCode::kDataLoss));
}

// A peer rewrites the header between two valid images and garbage while it
// is read: every header read is one of the images, whole, never a mix.
TEST(StagingHeaderTest, AHeaderRewrittenWhileItIsReadIsReadWholeOrNotAtAll) {
  std::vector<std::byte> slot(staging_layout::kHeaderBytes);
  std::vector<std::byte> garbage(kEncodedHeaderBytes, std::byte{0xa5});
  auto first = Header(5, 0x1000, 100), second = Header(5, 0x900000, 4096);
  first.resize(kEncodedHeaderBytes);
  second.resize(kEncodedHeaderBytes);
  const std::set<std::tuple<uint64_t, uint64_t>> images = {{0x1000, 100}, {0x900000, 4096}};
  int read = 0;
  // Garbage either fails its check (not there yet) or, torn with an image,
  // is a forged sequence (kDataLoss): never a header with mixed fields.
  auto parse = [&]() -> absl::Status {
    absl::StatusOr<std::optional<ChunkHeader>> header =
        ReadHeader(slot.data(), 5, kSlots, kSlotBytes, 3);
    if (!header.ok() || !header->has_value()) return header.status();
    ++read;
    if (images.count({(*header)->address, (*header)->length}) != 1) {
      return absl::InternalError(absl::StrCat("a header mixing two writes: address ",
                                              (*header)->address, ", length ", (*header)->length));
    }
    return absl::OkStatus();
  };
  for (auto tearing : {testing::RacingWriter::Tearing::kBytes,
                       testing::RacingWriter::Tearing::kWords}) {
    // Raced again (a fresh writer over a cleared slot, where nothing is
    // there yet) until a header was read whole: on a loaded machine the
    // reader may meet only torn slots in one race.
    read = 0;
    testing::RaceTally total;
    for (int race = 0; race < 20 && read == 0; ++race) {
      std::fill(slot.begin(), slot.end(), std::byte{0});
      auto writer = testing::RacingWriter::Flipping(absl::MakeSpan(slot), 0,
                                                    {first, garbage, second}, tearing);
      testing::Add(total, testing::RaceParse(*writer, parse, Long()));
    }
    EXPECT_EQ(total.other, 0) << total.first_other;
    EXPECT_GT(read, 0);
  }
}

std::vector<std::byte> Request(uint64_t sequence, uint64_t length) {
  std::vector<std::byte> bytes(staging_layout::kHeaderBytes);
  EncodeRequest({sequence, 0x5000, length, 0x9000, 0}, bytes.data());
  return bytes;
}

TEST(StagingRequestTest, ReadRequestsAreReadOnceCheckedAndForgedOnesRefused) {
  ASSERT_OK_AND_ASSIGN(std::optional<ReadRequest> request,
                       ReadRequestAt(Request(3, 4096).data(), 3, kSlots, 2));
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->source, 0x5000u);
  EXPECT_EQ(request->destination, 0x9000u);
  EXPECT_EQ(request->length, 4096u);
  // The slot's older request; a request caught half written.
  EXPECT_TRUE(Absent(ReadRequestAt(Request(3, 4096).data(), 7, kSlots, 2)));
  auto torn = Request(7, 4096);
  torn[16] = std::byte{0x01};
  EXPECT_TRUE(Absent(ReadRequestAt(torn.data(), 7, kSlots, 2)));
  // Another sequence, nothing asked, too much asked.
  EXPECT_THAT(ReadRequestAt(Request(9, 4096).data(), 7, kSlots, 2),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 2 wrote read request 9")));
  EXPECT_THAT(ReadRequestAt(Request(7, 0).data(), 7, kSlots, 2),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("asks for 0 bytes")));
  // A void request (a read cancelled before it went): nothing at all asked.
  // Nothing asked of an address, or into one, is forged.
  auto void_request = [](uint64_t source, uint64_t destination) {
    std::vector<std::byte> bytes(staging_layout::kHeaderBytes);
    EncodeRequest({7, source, 0, destination, 0}, bytes.data());
    return ReadRequestAt(bytes.data(), 7, kSlots, 2);
  };
  ASSERT_OK_AND_ASSIGN(std::optional<ReadRequest> nothing, void_request(0, 0));
  ASSERT_TRUE(nothing.has_value());
  EXPECT_EQ(nothing->length, 0u);
  EXPECT_THAT(void_request(0x5000, 0), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(void_request(0, 0x9000), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ReadRequestAt(Request(7, (uint64_t{1} << 40) + 1).data(), 7, kSlots, 2),
              StatusIs(absl::StatusCode::kDataLoss));
}

RemoteRegion Link(int owner, const std::string& backend, uint64_t length) {
  RemoteRegion region;
  region.backend = backend;
  region.owner_rank = owner;
  region.address = 0x10000;
  region.length = length;
  region.packed_key = "key";
  return region;
}

std::vector<std::byte> Entry(const std::string& bytes) {
  std::vector<std::byte> entry(staging_layout::kEntryBytes);
  std::memcpy(entry.data(), bytes.data(), std::min(bytes.size(), entry.size()));
  return entry;
}

// The incarnation of rank 3 the reader expects (Incarnation of its host
// address).
const uint64_t kPeer = Incarnation("rank 3's host address");

TEST(StagingEntryTest, APublishedLinkIsReadAndAnAbsentOneIsNotThereYet) {
  ASSERT_OK_AND_ASSIGN(std::optional<RemoteRegion> link,
                       ReadEntry(Entry(EncodeEntry(Link(3, "ucx", 1 << 20), kPeer)).data(), 3,
                                 kPeer, "ucx", 1 << 20));
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->length, 1u << 20);
  EXPECT_TRUE(Absent(ReadEntry(Entry("").data(), 3, kPeer, "ucx", 1 << 20)));
}

// A peer that restarted: what its earlier self wrote into our directory
// stays there until the new one writes over it, and must not be taken for
// the new link (its region is gone).
TEST(StagingEntryTest, AnEntryOfAnEarlierIncarnationIsNotThereYet) {
  const uint64_t earlier = Incarnation("rank 3's host address before it restarted");
  ASSERT_NE(earlier, kPeer);
  EXPECT_TRUE(Absent(
      ReadEntry(Entry(EncodeEntry(Link(3, "ucx", 1 << 20), earlier)).data(), 3, kPeer, "ucx",
                1 << 20)));
  ASSERT_OK_AND_ASSIGN(
      std::optional<RemoteRegion> link,
      ReadEntry(Entry(EncodeEntry(Link(3, "ucx", 1 << 20), kPeer)).data(), 3, kPeer, "ucx",
                1 << 20));
  EXPECT_TRUE(link.has_value());
}

TEST(StagingEntryTest, ForgedEntriesAreDataLossNamingThePeer) {
  auto read = [](const std::string& bytes) {
    return ReadEntry(Entry(bytes).data(), 3, kPeer, "ucx", 1 << 20);
  };
  // A length past the entry, garbage, another rank's, another backend's, a
  // device region, too small a region.
  uint64_t huge = staging_layout::kEntryBytes;
  EXPECT_THAT(read(std::string(reinterpret_cast<const char*>(&huge), 8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("claims")));
  // Garbage sealed as a forger would: it checks, and does not parse.
  EXPECT_THAT(read(SealEntry("0123456789", kPeer)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not parse")));
  // A body whose check word does not match: half rewritten, not there yet.
  std::string torn = EncodeEntry(Link(3, "ucx", 1 << 20), kPeer);
  torn[staging_layout::kEntryHeaderBytes + 3] ^= 0x20;
  EXPECT_TRUE(Absent(read(torn)));
  EXPECT_THAT(read(EncodeEntry(Link(4, "ucx", 1 << 20), kPeer)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 3")));
  EXPECT_THAT(read(EncodeEntry(Link(3, "ibverbs", 1 << 20), kPeer)),
              StatusIs(absl::StatusCode::kDataLoss));
  RemoteRegion device = Link(3, "ucx", 1 << 20);
  device.memory_kind = device::MemoryKind::kDevice;
  EXPECT_THAT(read(EncodeEntry(device, kPeer)), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(read(EncodeEntry(Link(3, "ucx", 4096), kPeer)),
              StatusIs(absl::StatusCode::kDataLoss));
}

// A peer rewrites its entry between two links and garbage while it is read:
// every entry read is one of the two, whole, or not there yet (or, for the
// garbage's length, refused), never a mix of both.
TEST(StagingEntryTest, AnEntryRewrittenWhileItIsReadIsReadWholeOrNotAtAll) {
  RemoteRegion one = Link(3, "ucx", 1 << 20), two = Link(3, "ucx", 1 << 21);
  two.address = 0x7f0000123000;
  two.packed_key = "another key of other length";
  auto image = [](const std::string& bytes) {
    std::vector<std::byte> out(staging_layout::kEntryBytes);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  };
  std::vector<std::byte> entry(staging_layout::kEntryBytes);
  const std::vector<std::vector<std::byte>> images = {
      image(EncodeEntry(one, kPeer)),
      std::vector<std::byte>(staging_layout::kEntryBytes, std::byte{0xa5}),
      image(EncodeEntry(two, kPeer))};
  int read = 0;
  auto parse = [&]() -> absl::Status {
    absl::StatusOr<std::optional<RemoteRegion>> link =
        ReadEntry(entry.data(), 3, kPeer, "ucx", 1 << 20);
    if (!link.ok()) {
      // The garbage's length, refused; any other refusal is a failure.
      if (absl::IsDataLoss(link.status()) && absl::StrContains(link.status().message(), "claims")) {
        return link.status();
      }
      return absl::InternalError(absl::StrCat("not a length refusal: ", link.status().ToString()));
    }
    if (!link->has_value()) return absl::OkStatus();
    ++read;
    const RemoteRegion& got = **link;
    const bool whole = (got.address == one.address && got.length == one.length &&
                        got.packed_key == one.packed_key) ||
                       (got.address == two.address && got.length == two.length &&
                        got.packed_key == two.packed_key);
    if (!whole) return absl::InternalError("an entry mixing two writes: " + got.DebugString());
    return absl::OkStatus();
  };
  // Raced again (a fresh writer over a cleared entry, where nothing is there
  // yet) until an entry was read whole: on a loaded machine the reader may
  // meet only torn entries in one race.
  testing::RaceTally total;
  for (int race = 0; race < 20 && read == 0; ++race) {
    std::fill(entry.begin(), entry.end(), std::byte{0});
    auto writer = testing::RacingWriter::Flipping(absl::MakeSpan(entry), 0, images);
    testing::Add(total, testing::RaceParse(*writer, parse, Long()));
  }
  EXPECT_EQ(total.other, 0) << total.first_other;
  EXPECT_GT(read, 0);
}

TEST(DeviceRangesTest, AChunkLandsOnlyInsideOneRegisteredRange) {
  DeviceRanges ranges;
  ranges.Add(0x10000, 0x1000);
  ranges.Add(0x20000, 0x100);
  EXPECT_TRUE(ranges.Contains(0x10000, 0x1000));
  EXPECT_TRUE(ranges.Contains(0x10fff, 1));
  EXPECT_TRUE(ranges.Contains(0x20080, 0x80));
  EXPECT_FALSE(ranges.Contains(0x10fff, 2));
  EXPECT_FALSE(ranges.Contains(0xffff, 2));
  EXPECT_FALSE(ranges.Contains(0x11000, 1));
  // Across two ranges, and sums that would wrap.
  EXPECT_FALSE(ranges.Contains(0x10000, 0x10100));
  EXPECT_FALSE(ranges.Contains(0x10800, std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(ranges.Contains(std::numeric_limits<uint64_t>::max(), 2));
  ranges.Remove(0x10000, 0x1000);
  EXPECT_FALSE(ranges.Contains(0x10000, 1));
  EXPECT_TRUE(ranges.Contains(0x20000, 1));
}

TEST(StagingOptionsTest, BadSizesAreRefused) {
  EXPECT_OK(CheckStagingOptions(StagingOptions{}));
  EXPECT_THAT(CheckStagingOptions({1, 1 << 20, 8}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStagingOptions({4, 1000, 8}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStagingOptions({4, 1 << 20, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::rdma::device_path
