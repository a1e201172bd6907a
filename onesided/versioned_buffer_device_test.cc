// Versioned buffers whose copies are in device memory (copies_in = kDevice):
// each rank's transport is a DeviceTransport over a fake device of its own,
// on a "host" of its own (the fake device's IPC opens only in another
// process, as CUDA's), so readers read the copies through the staged path,
// which the owner's progress answers. A reader pulling while the owner
// updates as fast as it can never gets a torn tensor, into device or host
// memory; version 0 is zeros although fresh device memory is not; a rank
// without device regions is refused by name, as owner and as reader; and
// the layouts and descriptors a hostile owner forges into the store are
// refused before anything is read.
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/versioned_buffer.h"
#include "rdma/device/testing/fake_device_rank.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Runs `body` for two ranks whose transports have device regions (or, for
// the ranks `host_only` names, their plain host transport).
void RunTwoRanks(const std::string& ns, const std::vector<bool>& host_only,
                 const std::function<absl::Status(int rank, rdma::Transport& transport,
                                                  device::FakeDevice* fake, PeerLinks& links,
                                                  rdma::Store& store)>& body) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& host, rdma::Store& store) {
        rdma::device_path::testing::FakeDeviceRank device;
        if (!host_only[rank]) {
          ASSIGN_OR_RETURN(device, rdma::device_path::testing::WrapInFakeDevice(
                                       std::move(host), absl::StrCat("versioned-host-", rank)));
        }
        rdma::Transport& transport =
            host_only[rank] ? *host : static_cast<rdma::Transport&>(*device.transport);
        absl::Status status = [&]() -> absl::Status {
          ProgressLoop loop(transport, ProgressLoopOptions{});
          ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                           PeerLinks::Create(transport, store, ns, loop, {}));
          const absl::Status done = body(rank, transport, device.device.get(), *links, store);
          // Neither leaves while the other may still read its memory, even
          // after a failure.
          const absl::Status left = Barrier(loop, store, ns, "left", 2, kTimeout);
          return done.ok() ? left : done;
        }();
        return status;
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Writes `value` into every 8-byte word of device memory at `at`, through
// a stream of `fake`, and waits for it: as Update()'s fill must.
absl::Status FillOnDevice(device::FakeDevice& fake, device::Stream& stream, std::byte* at,
                          size_t bytes, uint64_t value) {
  std::vector<uint64_t> words(bytes / sizeof(uint64_t), value);
  RETURN_IF_ERROR(stream.Copy(at, words.data(), bytes));
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, fake.CreateEvent());
  RETURN_IF_ERROR(stream.Record(*done));
  return done->WaitUntil(absl::Now() + kTimeout, "the fill of a version");
}

// The words of `bytes` at `at` (fake device memory is host memory).
std::vector<uint64_t> Words(const std::byte* at, size_t bytes) {
  std::vector<uint64_t> words(bytes / sizeof(uint64_t));
  std::memcpy(words.data(), at, bytes);
  return words;
}

// The owner updates as fast as it can while the reader pulls 120 times,
// alternately into device and host memory, and each pull is one version
// throughout. A staged read is answered by the owner's progress, one chunk
// a round, so an owner that never paused would overwrite every copy before
// any read of it finished: it makes at most two updates a finished read,
// enough with 2 copies to overwrite the copy a read is reading (the
// seqlock's retry), never enough to starve it.
TEST(VersionedBufferDeviceTest, PullsFromDeviceCopiesAreNeverTorn) {
  constexpr size_t kBytes = 96 << 10;
  constexpr int kReads = 120;
  constexpr uint64_t kUpdatesPerRead = 2;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  RunTwoRanks(
      "versioned_device_torn", {false, false},
      [&](int rank, rdma::Transport& transport, device::FakeDevice* fake, PeerLinks& links,
          rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer, VersionedBuffer::Create(links, "params", kBytes, 2,
                                                                device::MemoryKind::kDevice));
          EXPECT_EQ(buffer->copies_in(), device::MemoryKind::kDevice);
          EXPECT_EQ(buffer->copies_region().descriptor().memory_kind,
                    device::MemoryKind::kDevice);
          EXPECT_EQ(buffer->region().descriptor().memory_kind, device::MemoryKind::kHost);
          EXPECT_LT(buffer->region().size(), kBytes);  // the header only
          // The staged path needs both ranks connected.
          RETURN_IF_ERROR(links.Lane(1).status());
          ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, fake->CreateStream());
          absl::Status filled;
          while (!done.load()) {
            RETURN_IF_ERROR(links.loop().Poll().status());
            if (buffer->version() >= kUpdatesPerRead * (reads.load() + 1)) {
              std::this_thread::yield();  // the reader's turn (2 cores)
              continue;
            }
            const uint64_t next = buffer->version() + 1;
            buffer->Update([&](std::byte* out, const std::byte* latest) {
              // Each version derives from the last, as an optimizer's does.
              EXPECT_EQ(Words(latest, sizeof(uint64_t))[0], next - 1);
              if (filled.ok()) filled = FillOnDevice(*fake, *stream, out, kBytes, next);
            });
            RETURN_IF_ERROR(filled);
          }
          EXPECT_GT(buffer->version(), 1u);
          return absl::OkStatus();
        }
        absl::Cleanup stop = [&] { done = true; };
        ASSIGN_OR_RETURN(auto reader, VersionedReader::Create(links, "params", 0, kTimeout));
        EXPECT_EQ(reader->bytes(), kBytes);
        ASSIGN_OR_RETURN(rdma::MemoryRegion on_device, transport.AllocateDevice(kBytes));
        ASSIGN_OR_RETURN(rdma::MemoryRegion on_host, transport.Allocate(kBytes));
        uint64_t last = 0;
        for (int i = 0; i < kReads; ++i) {
          rdma::MemoryRegion& dst = i % 2 == 0 ? on_device : on_host;
          ASSIGN_OR_RETURN(uint64_t version, reader->Read({&dst, 0, kBytes}));
          const std::vector<uint64_t> words = Words(dst.data(), kBytes);
          for (size_t w = 0; w < words.size(); ++w) {
            if (words[w] != version) {
              return absl::DataLossError(absl::StrCat("read ", i, " of version ", version,
                                                      ": word ", w, " holds ", words[w]));
            }
          }
          EXPECT_GE(version, last);
          last = version;
          reads.fetch_add(1);
        }
        ::testing::Test::RecordProperty("retries", static_cast<int>(reader->retries()));
        return absl::OkStatus();
      });
}

// Before any Update() the reader gets version 0, zeros, although the fake
// device's fresh memory holds kFreshByte; then the first update.
TEST(VersionedBufferDeviceTest, VersionZeroIsZeros) {
  constexpr size_t kBytes = 200;
  RunTwoRanks(
      "versioned_device_zero", {false, false},
      [&](int rank, rdma::Transport& transport, device::FakeDevice* fake, PeerLinks& links,
          rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto buffer, VersionedBuffer::Create(links, "p", kBytes, 3,
                                                                device::MemoryKind::kDevice));
          RETURN_IF_ERROR(links.Lane(1).status());  // the staged path needs both
          RETURN_IF_ERROR(Barrier(links.loop(), store, links.ns(), "read0", 2, kTimeout));
          ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, fake->CreateStream());
          absl::Status filled;
          buffer->Update([&](std::byte* out, const std::byte*) {
            filled = FillOnDevice(*fake, *stream, out, kBytes, 77);
          });
          RETURN_IF_ERROR(filled);
          RETURN_IF_ERROR(Barrier(links.loop(), store, links.ns(), "updated", 2, kTimeout));
          return Barrier(links.loop(), store, links.ns(), "read1", 2, kTimeout);
        }
        ASSIGN_OR_RETURN(auto reader, VersionedReader::Create(links, "p", 0, kTimeout));
        ASSIGN_OR_RETURN(rdma::MemoryRegion dst, transport.Allocate(kBytes));
        std::memset(dst.data(), 0xEE, kBytes);
        EXPECT_THAT(reader->Read({&dst, 0, kBytes}), ::rdmaflow::testing::IsOkAndHolds(0u));
        EXPECT_EQ(Words(dst.data(), kBytes), std::vector<uint64_t>(kBytes / 8, 0));
        RETURN_IF_ERROR(Barrier(links.loop(), store, links.ns(), "read0", 2, kTimeout));
        RETURN_IF_ERROR(Barrier(links.loop(), store, links.ns(), "updated", 2, kTimeout));
        EXPECT_THAT(reader->Read({&dst, 0, kBytes}), ::rdmaflow::testing::IsOkAndHolds(1u));
        EXPECT_EQ(Words(dst.data(), kBytes), std::vector<uint64_t>(kBytes / 8, 77));
        return Barrier(links.loop(), store, links.ns(), "read1", 2, kTimeout);
      });
}

// A rank whose transport has no device regions can neither keep device
// copies nor read them, and says so.
TEST(VersionedBufferDeviceTest, ARankWithoutDeviceRegionsIsRefusedByName) {
  RunTwoRanks(
      "versioned_device_refused", {false, true},
      [&](int rank, rdma::Transport& transport, device::FakeDevice*, PeerLinks& links,
          rdma::Store&) -> absl::Status {
        if (rank == 0) {
          return VersionedBuffer::Create(links, "p", 64, 2, device::MemoryKind::kDevice)
              .status();
        }
        EXPECT_THAT(VersionedBuffer::Create(links, "q", 64, 2, device::MemoryKind::kDevice),
                    StatusIs(absl::StatusCode::kUnimplemented,
                             AllOf(HasSubstr("versioned buffer 'q'"),
                                   HasSubstr("copies in device memory"))));
        EXPECT_THAT(VersionedReader::Create(links, "p", 0, kTimeout),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             AllOf(HasSubstr("versioned buffer 'p' of rank 0"),
                                   HasSubstr("no device regions"))));
        return absl::OkStatus();
      });
}

// Layouts and descriptors a hostile owner forges into the store for a
// buffer with device copies: refused, naming what is wrong, before the
// reader reads anything; the honest one is accepted.
TEST(VersionedBufferDeviceTest, ForgedDeviceLayoutsAndDescriptorsAreRefused) {
  struct Case {
    std::string layout;
    enum Copies { kReal, kShort, kOtherRank, kHostHeader, kHostCopies, kMissing } copies;
    absl::StatusCode code;
    std::string error;  // empty: accepted
  };
  // 64-byte tensors in 3 copies: a 64-byte header, 192 bytes of copies.
  const std::vector<Case> cases = {
      {"64 3 device", Case::kReal, absl::StatusCode::kOk, ""},
      {"64 3 gpu", Case::kReal, absl::StatusCode::kInvalidArgument, "malformed"},
      {"64 3 device x", Case::kReal, absl::StatusCode::kInvalidArgument, "malformed"},
      {"64 3 device", Case::kShort, absl::StatusCode::kInvalidArgument,
       "does not hold 192 bytes"},
      {"64 3 device", Case::kOtherRank, absl::StatusCode::kInvalidArgument,
       "does not hold 192 bytes of rank 0"},
      // The header region (64 bytes) passed off as the copies.
      {"64 3 device", Case::kHostHeader, absl::StatusCode::kInvalidArgument,
       "does not hold 192 bytes"},
      // Host memory large enough, where the layout says device copies.
      {"64 3 device", Case::kHostCopies, absl::StatusCode::kInvalidArgument,
       "is not device memory"},
      {"64 3 device", Case::kMissing, absl::StatusCode::kDeadlineExceeded, "copies"},
      {"9223372036854775808 2 device", Case::kReal, absl::StatusCode::kInvalidArgument,
       "overflow"},
  };
  const std::string ns = "versioned_device_forged";
  RunTwoRanks(
      ns, {false, false},
      [&](int rank, rdma::Transport& transport, device::FakeDevice*, PeerLinks& links,
          rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          ASSIGN_OR_RETURN(rdma::MemoryRegion header, transport.Allocate(64));
          ASSIGN_OR_RETURN(rdma::MemoryRegion copies, transport.AllocateDevice(192));
          ASSIGN_OR_RETURN(rdma::MemoryRegion host_copies, transport.Allocate(192));
          for (size_t i = 0; i < cases.size(); ++i) {
            const std::string name = absl::StrCat("b", i);
            rdma::RemoteRegion forged = copies.descriptor();
            if (cases[i].copies == Case::kShort) forged.length = 191;
            if (cases[i].copies == Case::kOtherRank) forged.owner_rank = 1;
            if (cases[i].copies == Case::kHostHeader) forged = header.descriptor();
            if (cases[i].copies == Case::kHostCopies) forged = host_copies.descriptor();
            RETURN_IF_ERROR(
                store.Set(absl::StrCat(ns, "/versioned/", name, "/layout"), cases[i].layout));
            RETURN_IF_ERROR(rdma::PublishRegion(store, ns, absl::StrCat("versioned/", name),
                                                header.descriptor()));
            if (cases[i].copies != Case::kMissing) {
              RETURN_IF_ERROR(rdma::PublishRegion(
                  store, ns, absl::StrCat("versioned/", name, "/copies"), forged));
            }
          }
          RETURN_IF_ERROR(store.Set(ns + "/published", "1"));
          return Barrier(links.loop(), store, ns, "judged", 2, kTimeout);
        }
        // Every case published first: the missing copies' short wait then
        // meets only the copies missing, not a layout still on its way.
        RETURN_IF_ERROR(store.Wait({ns + "/published"}, kTimeout));
        for (size_t i = 0; i < cases.size(); ++i) {
          SCOPED_TRACE(absl::StrCat("layout '", cases[i].layout, "', case ", i));
          const absl::Duration wait =
              cases[i].copies == Case::kMissing ? absl::Milliseconds(200) : kTimeout;
          absl::StatusOr<std::unique_ptr<VersionedReader>> reader =
              VersionedReader::Create(links, absl::StrCat("b", i), 0, wait);
          if (cases[i].error.empty()) {
            EXPECT_OK(reader.status());
          } else {
            EXPECT_THAT(reader, StatusIs(cases[i].code, HasSubstr(cases[i].error)));
          }
        }
        return Barrier(links.loop(), store, ns, "judged", 2, kTimeout);
      });
}

}  // namespace
}  // namespace rdmaflow::onesided
