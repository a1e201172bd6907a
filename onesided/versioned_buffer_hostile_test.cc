// Versioned buffers against a hostile owner: rank 0 writes forged headers
// (latest version, stamps, and the copy they vouch for) straight into the
// memory its readers read, and forged layouts and descriptors into the
// store, as a buggy or malicious peer could. A version that goes back, or
// one no stamp can hold (2^63 and up, where 2v wraps), fails the reader with
// kDataLoss for good instead of returning wrong data; random forgeries are
// checked against a model of the protocol; a layout whose sizes wrap, or
// that asks for more copies than kMaxCopies, is refused before anything is
// allocated or connected.
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/versioned_buffer.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMax = ~uint64_t{0};
constexpr uint64_t kHalf = uint64_t{1} << 63;
// 64-byte tensors in 3 copies: the header (version word, 3 stamps) padded
// to 64 bytes, then the copies, 64 bytes apart (versioned_buffer.h).
constexpr size_t kBytes = 64;
constexpr int kCopies = 3;
constexpr size_t kHeader = 64;

void StoreWord(std::byte* at, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(at), value, __ATOMIC_RELEASE);
}

// What a hostile owner writes for a "consistent" forgery of version `v`:
// its copy filled with v, the copy's stamp 2v (as the reader computes it,
// wrapping), then v as the latest.
void ForgeVersion(const VersionedBuffer& buffer, uint64_t v) {
  std::byte* base = buffer.region().data();
  std::byte* copy = base + kHeader + (v % kCopies) * kBytes;
  for (size_t w = 0; w < kBytes / 8; ++w) StoreWord(copy + 8 * w, v);
  StoreWord(base + 8 * (1 + v % kCopies), 2 * v);
  StoreWord(base, v);
}

// Rank 0 owns buffer `name` and, for each i, runs `forge(i, buffer)`; then
// rank 1 runs `judge(i, reader, dst)`, one after the other.
void RunForgery(const std::string& name, size_t count,
                const std::function<void(size_t, VersionedBuffer&)>& forge,
                const std::function<void(size_t, VersionedReader&, rdma::MemoryRegion&)>&
                    judge) {
  const std::string ns = absl::StrCat("versioned_hostile_", name);
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, ns, loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer, VersionedBuffer::Create(*links, name, kBytes, kCopies));
          for (size_t i = 0; i < count; ++i) {
            forge(i, *buffer);
            RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/forged/", i), "1"));
            RETURN_IF_ERROR(
                store.Get(absl::StrCat(ns, "/judged/", i), absl::Seconds(60)).status());
          }
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(auto reader, VersionedReader::Create(*links, name, 0,
                                                              absl::Seconds(60)));
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(kBytes));
        for (size_t i = 0; i < count; ++i) {
          RETURN_IF_ERROR(
              store.Get(absl::StrCat(ns, "/forged/", i), absl::Seconds(60)).status());
          judge(i, *reader, dst);
          RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/judged/", i), "1"));
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

uint64_t Word(const rdma::MemoryRegion& region, size_t w) {
  return reinterpret_cast<const uint64_t*>(region.data())[w];
}

TEST(VersionedBufferHostileTest, VersionGoingBackIsDataLossForGood) {
  RunForgery(
      "back", 3,
      [](size_t i, VersionedBuffer& buffer) {
        if (i == 0) {
          for (int v = 1; v <= 5; ++v) {
            buffer.Update([&](std::byte* next, const std::byte*) {
              std::memset(next, v, kBytes);
            });
          }
        } else if (i == 1) {
          ForgeVersion(buffer, 3);  // back from 5 (returned as 3 before)
        } else {
          ForgeVersion(buffer, 6);  // forward again: too late
        }
      },
      [](size_t i, VersionedReader& reader, rdma::MemoryRegion& dst) {
        if (i == 0) {
          EXPECT_THAT(reader.Read({&dst, 0, kBytes}), IsOkAndHolds(5u));
          return;
        }
        EXPECT_THAT(reader.Read({&dst, 0, kBytes}),
                    StatusIs(absl::StatusCode::kDataLoss,
                             HasSubstr("went back from version 5 to 3")));
        EXPECT_THAT(reader.LatestVersion(), StatusIs(absl::StatusCode::kDataLoss,
                                                     HasSubstr("of rank 0")));
      });
}

TEST(VersionedBufferHostileTest, LatestVersionGoingBackIsDataLoss) {
  RunForgery(
      "latest_back", 2,
      [](size_t i, VersionedBuffer& buffer) { ForgeVersion(buffer, i == 0 ? 9 : 8); },
      [](size_t i, VersionedReader& reader, rdma::MemoryRegion&) {
        if (i == 0) {
          EXPECT_THAT(reader.LatestVersion(), IsOkAndHolds(9u));
        } else {
          EXPECT_THAT(reader.LatestVersion(), StatusIs(absl::StatusCode::kDataLoss,
                                                       HasSubstr("from version 9 to 8")));
        }
      });
}

TEST(VersionedBufferHostileTest, VersionsNoStampCanHoldAreDataLoss) {
  // 2v wraps from 2^63 on: with the stamp forged to match, the copy was
  // returned as version 2^63 + k before.
  const std::vector<uint64_t> huge = {kHalf, kHalf + 1, kMax - 1, kMax};
  for (size_t k = 0; k < huge.size(); ++k) {
    const uint64_t v = huge[k];
    RunForgery(
        absl::StrCat("huge", k), 1,
        [&](size_t, VersionedBuffer& buffer) { ForgeVersion(buffer, v); },
        [&](size_t, VersionedReader& reader, rdma::MemoryRegion& dst) {
          EXPECT_THAT(reader.Read({&dst, 0, kBytes}),
                      StatusIs(absl::StatusCode::kDataLoss,
                               HasSubstr(absl::StrCat("says version ", v))));
          EXPECT_THAT(reader.LatestVersion(), StatusIs(absl::StatusCode::kDataLoss));
        });
  }
}

// Random forgeries against a model of the protocol: a read returns exactly
// the forged version v, with its copy's bytes, while v is neither below the
// highest version seen nor 2^63 or more; from the first such v on, every
// call is kDataLoss. A jump forward (an owner updating faster than we read)
// is accepted.
TEST(VersionedBufferHostileTest, RandomForgeriesFollowTheModel) {
  const uint64_t seed = 7031;
  std::mt19937_64 random(seed);
  int accepted = 0;
  int failed_rounds = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<uint64_t> versions;
    uint64_t high = 0;
    for (int i = 0; i < 30; ++i) {
      uint64_t v = 0;
      switch (random() % 24) {  // about one in ten breaks the protocol
        case 0:  // back
          v = high == 0 ? 0 : random() % high;
          break;
        case 1:  // no stamp can hold it
          v = kHalf + random() % kHalf;
          break;
        case 2:  // anything
          v = random();
          break;
        case 3:  // the same
          v = high;
          break;
        case 4:
        case 5:  // a jump
          v = high + 1 + random() % (uint64_t{1} << 40);
          break;
        default:
          v = high + 1 + random() % 3;
      }
      versions.push_back(v);
      if (v < kHalf && v > high) high = v;
    }
    uint64_t last = 0;
    bool failed = false;
    RunForgery(
        absl::StrCat("random", round), versions.size(),
        [&](size_t i, VersionedBuffer& buffer) { ForgeVersion(buffer, versions[i]); },
        [&](size_t i, VersionedReader& reader, rdma::MemoryRegion& dst) {
          const uint64_t v = versions[i];
          SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round, " forgery ", i,
                                    ": version ", v, " after ", last));
          if (v >= kHalf || v < last) failed = true;
          std::memset(dst.data(), 0xEE, kBytes);
          absl::StatusOr<uint64_t> got = i % 2 == 0 ? reader.Read({&dst, 0, kBytes})
                                                    : reader.LatestVersion();
          if (failed) {
            EXPECT_THAT(got, StatusIs(absl::StatusCode::kDataLoss));
            return;
          }
          EXPECT_THAT(got, IsOkAndHolds(v));
          if (i % 2 == 0) {
            for (size_t w = 0; w < kBytes / 8; ++w) EXPECT_EQ(Word(dst, w), v) << w;
          }
          last = v;
          ++accepted;
        });
    failed_rounds += failed ? 1 : 0;
  }
  // The seed exercises both sides of the model.
  EXPECT_GE(accepted, 20);
  EXPECT_GE(failed_rounds, 3);
  ::testing::Test::RecordProperty("accepted", accepted);
}

TEST(VersionedBufferHostileTest, OwnerSizesThatWrapAreRefused) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        // Copies of 2^63 bytes wrap to a region of one header before.
        for (size_t bytes : {size_t{kHalf}, size_t{kMax}, size_t{kMax - 63}}) {
          EXPECT_THAT(VersionedBuffer::Create(transport, store, "versioned_hostile_own",
                                              "big", bytes, 2),
                      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflow")))
              << bytes;
        }
        for (int copies : {VersionedBuffer::kMaxCopies + 1,
                           std::numeric_limits<int>::max()}) {
          EXPECT_THAT(VersionedBuffer::Create(transport, store, "versioned_hostile_own",
                                              "many", 64, copies),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr(absl::StrCat("copies is ", copies))));
        }
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

// Layouts forged into the store next to a descriptor of `length` bytes
// (the real region's, or a lie): each reader is refused, naming the field,
// before it allocates or connects; the largest valid layout is accepted.
TEST(VersionedBufferHostileTest, ForgedLayoutsInTheStoreAreRefused) {
  struct Case {
    std::string layout;
    uint64_t length;  // the descriptor's claim; 0: the real region's
    std::string error;  // empty: accepted
  };
  constexpr uint64_t kLie = uint64_t{1} << 40;
  // 1024 copies of 64 bytes: a header of 1025 words (8200, padded to 8256)
  // and 65536 bytes of copies.
  constexpr size_t kLargest = 8256 + 1024 * 64;
  const std::vector<Case> cases = {
      {"9223372036854775808 2", 0, "overflow"},   // 2 x 2^63 wraps to 0
      {"18446744073709551615 2", 0, "overflow"},  // rounding up wraps
      {"4611686018427387904 4", 0, "overflow"},   // 4 x 2^62
      {"18446744073709551552 3", 0, "overflow"},  // 2^64 - 64, 3 copies
      {"64 1048576", kLie, "copies is 1048576"},  // 8 MiB of header before
      {"64 1025", kLie, "copies is 1025"},
      {"64 2147483647", kLie, "copies is 2147483647"},
      {"64 -3", 0, "copies is -3"},
      {"64 1", 0, "copies is 1"},
      {"0 2", 0, "bytes is 0"},
      {"-64 2", 0, "malformed"},
      {"18446744073709551616 2", 0, "malformed"},  // 2^64
      {"64", 0, "malformed"},
      {"64 2 2", 0, "malformed"},
      {"", 0, "malformed"},
      {"64 1024", kLargest - 1, "does not hold 73792 bytes"},
      {"64 1024", 0, ""},
  };
  const std::string ns = "versioned_hostile_layouts";
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, ns, loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(kLargest));
          for (size_t i = 0; i < cases.size(); ++i) {
            rdma::RemoteRegion descriptor = region.descriptor();
            if (cases[i].length != 0) descriptor.length = cases[i].length;
            RETURN_IF_ERROR(
                store.Set(absl::StrCat(ns, "/versioned/b", i, "/layout"), cases[i].layout));
            RETURN_IF_ERROR(
                rdma::PublishRegion(store, ns, absl::StrCat("versioned/b", i), descriptor));
          }
          return rdma::Barrier(store, ns, "done", 2, absl::Seconds(60));
        }
        for (size_t i = 0; i < cases.size(); ++i) {
          SCOPED_TRACE(absl::StrCat("layout '", cases[i].layout, "'"));
          absl::StatusOr<std::unique_ptr<VersionedReader>> reader = VersionedReader::Create(*links, absl::StrCat("b", i), 0, absl::Seconds(60));
          if (cases[i].error.empty()) {
            EXPECT_OK(reader.status());
            if (reader.ok()) {
              EXPECT_EQ((*reader)->bytes(), 64u);
            }
          } else {
            EXPECT_THAT(reader, StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr(cases[i].error)));
          }
        }
        return rdma::Barrier(store, ns, "done", 2, absl::Seconds(60));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::onesided
