// File: versioned_buffer_racing_test.cc
// VersionedReader against an owner that rewrites its header while readers
// read it (rdma/testing/racing_writer.h): the latest version flipping
// between honest values, one going back and one no stamp can hold (whole
// words, and torn bytes), and a copy's stamp flipping to "being written".
// The copies themselves hold consistent forgeries (copy v % 3 filled with v,
// its stamp 2v) and are not rewritten, so a version returned with another
// version's bytes can only come from reading the header twice. Every Read()
// returns a version the header held, never below one returned before, with
// that version's bytes; or kDataLoss naming the owner, for good (kAborted
// when the stamp stayed "being written" for 1000 attempts).
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "onesided/versioned_buffer.h"
#include "rdma/testing/racing_writer.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::rdma::testing::RacingWriter;

// 64-byte tensors in 3 copies: the header (latest version, 3 stamps) padded
// to 64 bytes, then the copies, 64 bytes apart (versioned_buffer.h).
constexpr size_t kBytes = 64;
constexpr int kCopies = 3;
constexpr size_t kHeader = 64;
constexpr uint64_t kHalf = uint64_t{1} << 63;
constexpr int kEpisodes = 30;
constexpr int kMaxEpisodes = 1000;
constexpr int kReadsPerEpisode = 40;

// A header image: the latest version, then the stamps of copies 0..2.
std::vector<std::byte> Header(uint64_t latest, uint64_t s0, uint64_t s1, uint64_t s2) {
  const uint64_t words[] = {latest, s0, s1, s2};
  std::vector<std::byte> bytes(sizeof(words));
  std::memcpy(bytes.data(), words, sizeof(words));
  return bytes;
}

struct Outcome {
  int64_t reads = 0;
  int64_t returned = 0;
  int64_t refused = 0;
  int64_t aborted = 0;
  std::vector<std::string> wrong;  // test failures, described
};

// Rank 0 owns the buffer: copies 0, 1, 2 hold versions 3, 4, 5 (every word
// the version, stamps 6, 8, 10), then `race(header)` rewrites the header
// until rank 1 is done. Rank 1 reads with a fresh reader per episode.
// `versions`: what the latest word may hold whole or torn; `valid`: those a
// reader may return.
Outcome RunRace(const std::string& name,
                const std::function<std::unique_ptr<RacingWriter>(absl::Span<std::byte>)>& race,
                const std::set<uint64_t>& valid) {
  Outcome outcome;
  const std::string ns = absl::StrCat("versioned_racing_", name);
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, ns, loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer,
                           VersionedBuffer::Create(*links, name, kBytes, kCopies));
          std::byte* base = buffer->region().data();
          for (uint64_t v = 3; v <= 5; ++v) {
            uint64_t* copy = reinterpret_cast<uint64_t*>(base + kHeader + (v % kCopies) * kBytes);
            for (size_t w = 0; w < kBytes / 8; ++w) copy[w] = v;
          }
          std::memcpy(base, Header(5, 6, 8, 10).data(), 4 * sizeof(uint64_t));
          std::unique_ptr<RacingWriter> writer = race(absl::MakeSpan(base, 4 * sizeof(uint64_t)));
          RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/racing"), "1"));
          const absl::Status done =
              store.Get(absl::StrCat(ns, "/done"), absl::Seconds(60)).status();
          writer->Stop();
          if (writer->rounds() == 0) return absl::InternalError("the writer never wrote");
          return done;
        }
        // However rank 1 leaves, rank 0 stops its writer.
        absl::Cleanup done = [&] { store.Set(absl::StrCat(ns, "/done"), "1").IgnoreError(); };
        RETURN_IF_ERROR(store.Get(absl::StrCat(ns, "/racing"), absl::Seconds(60)).status());
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(kBytes));
        // kEpisodes, and more (up to kMaxEpisodes, a millisecond apart)
        // until both a read and a refusal were seen: on a loaded machine the
        // writer may sit on one image while many episodes pass.
        for (int episode = 0;
             episode < kEpisodes ||
             (episode < kMaxEpisodes && (outcome.returned == 0 || outcome.refused == 0));
             ++episode) {
          if (episode >= kEpisodes) absl::SleepFor(absl::Milliseconds(1));
          ASSIGN_OR_RETURN(auto reader,
                           VersionedReader::Create(*links, name, 0, absl::Seconds(60)));
          uint64_t last = 0;
          std::optional<absl::Status> failure;
          for (int read = 0; read < kReadsPerEpisode; ++read) {
            ++outcome.reads;
            absl::StatusOr<uint64_t> got = reader->Read({&dst, 0, kBytes});
            if (failure.has_value()) {
              if (got.ok() || got.status() != *failure ||
                  reader->LatestVersion().status() != *failure) {
                outcome.wrong.push_back(
                    absl::StrCat("after ", failure->ToString(), ": ",
                                 got.ok() ? "a read" : got.status().ToString()));
              }
              continue;
            }
            if (got.ok()) {
              ++outcome.returned;
              const uint64_t* words = reinterpret_cast<const uint64_t*>(dst.data());
              bool whole = true;
              for (size_t w = 0; w < kBytes / 8; ++w) whole &= words[w] == *got;
              if (valid.count(*got) == 0 || *got < last || !whole) {
                outcome.wrong.push_back(absl::StrCat("version ", *got, " after ", last,
                                                     " with bytes of ", words[0],
                                                     whole ? "" : " (mixed)"));
              }
              last = *got;
              continue;
            }
            const std::string message(got.status().message());
            if (got.status().code() == absl::StatusCode::kAborted &&
                message.find("lost the race") != std::string::npos) {
              ++outcome.aborted;
              continue;
            }
            if (got.status().code() != absl::StatusCode::kDataLoss ||
                message.find(absl::StrCat("versioned buffer '", name, "' of rank 0")) ==
                    std::string::npos) {
              outcome.wrong.push_back(got.status().ToString());
              break;
            }
            ++outcome.refused;
            failure = got.status();
          }
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return outcome;
}

void ExpectOnlyValidEndings(const Outcome& outcome) {
  EXPECT_TRUE(outcome.wrong.empty())
      << outcome.wrong.size() << " wrong, the first: " << outcome.wrong.front();
  EXPECT_GT(outcome.returned, 0);
  EXPECT_GT(outcome.refused, 0);
  ::testing::Test::RecordProperty("reads", static_cast<int>(outcome.reads));
  ::testing::Test::RecordProperty("returned", static_cast<int>(outcome.returned));
  ::testing::Test::RecordProperty("refused", static_cast<int>(outcome.refused));
  ::testing::Test::RecordProperty("aborted", static_cast<int>(outcome.aborted));
}

// Whole words: latest 5 (honest), 4 (going back after 5), 2^63 + 2 (no
// stamp can hold it), and 5 with copy 2's stamp at 15 (being rewritten for
// version 8): a reader that took the version from one load of the header
// and the copy from another would return 4 with 5's bytes, or reach
// WholeStamp(2^63 + 2), which wraps.
TEST(VersionedBufferRacingTest, AHeaderFlippingWhileItIsReadIsReadOnce) {
  const Outcome outcome =
      RunRace("words",
              [](absl::Span<std::byte> header) {
                return RacingWriter::Flipping(header, 0,
                                              {Header(5, 6, 8, 10), Header(4, 6, 8, 10),
                                               Header(kHalf + 2, 6, 8, 10), Header(5, 6, 8, 15)},
                                              RacingWriter::Tearing::kWords);
              },
              {4, 5});
  ExpectOnlyValidEndings(outcome);
}

// The latest version torn byte by byte between 4 and 2^63 + 5: a load may
// see 4, 5, 2^63 + 4 or 2^63 + 5; the last two are refused, never read.
TEST(VersionedBufferRacingTest, ATornLatestVersionIsRefusedOrHonest) {
  const Outcome outcome =
      RunRace("torn",
              [](absl::Span<std::byte> header) {
                return RacingWriter::Flipping(header, 0,
                                              {Header(4, 6, 8, 10), Header(kHalf + 5, 6, 8, 10)});
              },
              {4, 5});
  ExpectOnlyValidEndings(outcome);
}

}  // namespace
}  // namespace rdmaflow::onesided
