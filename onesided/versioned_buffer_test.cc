// Versioned buffers: a reader pulling while the owner updates as fast as it
// can never sees a torn tensor (every word of a read is the same version,
// the one Read() returns), versions never go back, and bad uses are refused.
#include "onesided/versioned_buffer.h"

#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "versioned_test";

void FillWith(std::byte* data, size_t bytes, uint64_t value) {
  uint64_t* words = reinterpret_cast<uint64_t*>(data);
  for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) words[i] = value;
}

// The owner updates without pause (copies: 2, the tightest) while the
// reader pulls 300 times; each pull must be one version throughout.
TEST(VersionedBufferTest, PullsNeverObserveTornTensorsUnderConcurrentUpdates) {
  constexpr size_t kBytes = size_t{1} << 20;
  std::atomic<bool> done{false};
  std::atomic<int64_t> retries{0};
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, kNs, loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer,
                           VersionedBuffer::Create(transport, store, kNs,
                                                   "params", kBytes, 2));
          while (!done.load()) {
            const uint64_t next = buffer->version() + 1;
            buffer->Update([&](std::byte* out, const std::byte* latest) {
              // Each version derives from the last, as an optimizer's does.
              EXPECT_EQ(*reinterpret_cast<const uint64_t*>(latest), next - 1);
              FillWith(out, kBytes, next);
            });
          }
          EXPECT_GT(buffer->version(), 0u);
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(auto reader,
                         VersionedReader::Create(*links, "params",
                                                 0, absl::Seconds(60)));
        EXPECT_EQ(reader->bytes(), kBytes);
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(kBytes));
        uint64_t last = 0;
        for (int i = 0; i < 300; ++i) {
          ASSIGN_OR_RETURN(uint64_t version, reader->Read({&dst, 0, kBytes}));
          const uint64_t* words = reinterpret_cast<const uint64_t*>(dst.data());
          for (size_t w = 0; w < kBytes / sizeof(uint64_t); ++w) {
            if (words[w] != version) {
              done = true;
              return absl::DataLossError(absl::StrCat(
                  "read ", i, " of version ", version, ": word ", w, " holds ",
                  words[w]));
            }
          }
          EXPECT_GE(version, last);
          last = version;
        }
        retries = reader->retries();
        done = true;
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  ::testing::Test::RecordProperty("retries", static_cast<int>(retries.load()));
}

TEST(VersionedBufferTest, ReaderSeesEachUpdateAndTheLatestVersion) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport,
             rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, kNs, loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer, VersionedBuffer::Create(*links, "p", 24, 3));
          for (uint64_t v = 1; v <= 5; ++v) {
            buffer->Update([&](std::byte* out, const std::byte*) {
              FillWith(out, 24, v * 10);
            });
            RETURN_IF_ERROR(store.Set(absl::StrCat("updated/", v), "1"));
            RETURN_IF_ERROR(store.Wait({absl::StrCat("read/", v)},
                                       absl::Seconds(60)));
          }
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(auto reader, VersionedReader::Create(*links, "p", 0,
                                          absl::Seconds(60)));
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(24));
        for (uint64_t v = 1; v <= 5; ++v) {
          RETURN_IF_ERROR(store.Wait({absl::StrCat("updated/", v)},
                                     absl::Seconds(60)));
          EXPECT_THAT(reader->LatestVersion(), IsOkAndHolds(v));
          ASSIGN_OR_RETURN(uint64_t version, reader->Read({&dst, 0, 24}));
          EXPECT_EQ(version, v);
          EXPECT_EQ(reinterpret_cast<const uint64_t*>(dst.data())[2], v * 10);
          EXPECT_EQ(reader->retries(), 0);
          RETURN_IF_ERROR(store.Set(absl::StrCat("read/", v), "1"));
        }
        // A destination of the wrong size is refused before anything moves,
        // and so is one whose offset + length wraps.
        EXPECT_THAT(reader->Read({&dst, 0, 16}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("must be 24 bytes")));
        EXPECT_THAT(reader->Read({&dst, ~size_t{0} - 7, 24}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("must be 24 bytes")));
        EXPECT_THAT(reader->Read({&dst, 1, 24}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("must be 24 bytes")));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(VersionedBufferTest, RejectsBadLayoutsAndMissingOwners) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, kNs, loop, {}));
        EXPECT_THAT(VersionedBuffer::Create(transport, store, kNs, "a", 0, 3),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(VersionedBuffer::Create(transport, store, kNs, "a", 8, 1),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("at least 2 copies")));
        EXPECT_THAT(VersionedReader::Create(*links, "nobody", 3,
                                            absl::Milliseconds(50)),
                    StatusIs(absl::StatusCode::kDeadlineExceeded,
                             HasSubstr("'nobody' of rank 3")));
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

TEST(VersionedBufferTest, AReaderOfAnOwnerSeveredOnItsLinksSaysWhy) {
  // Another protocol on the links severed the owner (its operations hung):
  // the reader's next read fails with the links' reason, not with a closed
  // endpoint's.
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                         PeerLinks::Create(transport, store, "versioned_severed", loop, {}));
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer, VersionedBuffer::Create(*links, "p", 24, 2));
          return store.Wait({"versioned_severed/done"}, absl::Seconds(60));
        }
        ASSIGN_OR_RETURN(auto reader, VersionedReader::Create(*links, "p", 0, absl::Seconds(60)));
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(24));
        EXPECT_OK(reader->Read({&dst, 0, 24}).status());
        EXPECT_OK(reader->Probe());
        // The probe that does not wait: answered from the loop's progress.
        absl::Status answer = absl::UnknownError("not answered");
        bool answered = false;
        EXPECT_OK(reader->PostProbe([&](absl::Status status) {
          answer = std::move(status);
          answered = true;
        }));
        EXPECT_OK(loop.WaitFor([&] { return answered; }, absl::Now() + absl::Seconds(60),
                               "the probe's answer"));
        EXPECT_OK(answer);
        links->Sever(0, absl::UnavailableError("a ring gave up on rank 0"));
        EXPECT_THAT(reader->Probe(),
                    StatusIs(absl::StatusCode::kUnavailable, HasSubstr("a ring gave up")));
        EXPECT_THAT(reader->PostProbe([](absl::Status) {}),
                    StatusIs(absl::StatusCode::kUnavailable, HasSubstr("a ring gave up")));
        EXPECT_THAT(reader->Read({&dst, 0, 24}),
                    StatusIs(absl::StatusCode::kUnavailable,
                             AllOf(HasSubstr("reading versioned buffer 'p' of rank 0"),
                                   HasSubstr("a ring gave up on rank 0"))));
        EXPECT_THAT(reader->LatestVersion(),
                    StatusIs(absl::StatusCode::kUnavailable, HasSubstr("a ring gave up")));
        reader.reset();
        return store.Set("versioned_severed/done", "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::onesided
