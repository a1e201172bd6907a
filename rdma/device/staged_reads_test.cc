// File: staged_reads_test.cc
// Staged reads cancelled before their request went (rdma/device/staging.h)
// between two device transports over the in-process loopback backend, each
// on a fake device of its own and claiming a host of its own, progressed
// by hand: rank 0 runs on while rank 1 stands still, so a request slot
// rank 0 wrote again before rank 1 took what was in it shows, every time.
// A void request is taken by the peer, answered by an empty chunk, and its
// slot is reused only after that; the reads behind it are answered whole.
// And the chunks rank 1 writes into rank 0's link, forged (the in-process
// backend maps the link for the test): an empty answer to a read that
// asked for bytes, to no read under way, to a read not yet sent; an
// answer outside its read's destination; a write outside any device
// region: each fails the link with kDataLoss naming rank 1, and the read
// under way with it.
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/blocking.h"
#include "rdma/device/device_key.pb.h"
#include "rdma/device/device_transport.h"
#include "rdma/device/staging.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr size_t kSlots = 2;
constexpr size_t kChunk = 4096;  // a slot's bytes, and each read's
constexpr size_t kSourceBytes = 16 * kChunk;

uint8_t Pattern(size_t i) { return static_cast<uint8_t>((i * 131 + 7) % 251); }

struct Rank {
  std::unique_ptr<device::FakeDevice> device;
  std::unique_ptr<DeviceTransport> transport;
};

absl::StatusOr<Rank> MakeRank(const std::shared_ptr<loopback::LoopbackFabric>& fabric, int rank) {
  loopback::LoopbackTransportOptions host_options;
  host_options.rank = rank;
  host_options.fabric = fabric;
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> host,
                   loopback::LoopbackTransport::Create(host_options));
  Rank made;
  ASSIGN_OR_RETURN(made.device, device::FakeDevice::Create(device::FakeDeviceOptions{}));
  DeviceTransportOptions options;
  options.host_identity = absl::StrCat("staged-reads-host-", rank);
  options.staging.slots = kSlots;
  options.staging.slot_bytes = kChunk;
  options.staging.directory_ranks = 2;
  ASSIGN_OR_RETURN(made.transport,
                   DeviceTransport::Create(std::move(host), made.device.get(), options));
  return made;
}

class StagedReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fabric = loopback::LoopbackFabric::Create();
    for (int rank : {0, 1}) {
      absl::StatusOr<Rank> made = MakeRank(fabric, rank);
      ASSERT_OK(made.status());
      ranks_[rank] = *std::move(made);
    }
    // Both ways: each side's link is where the other writes.
    ASSERT_OK_AND_ASSIGN(to_1_, t(0).Connect({1, t(1).address()}));
    ASSERT_OK_AND_ASSIGN(to_1_again_, t(0).Connect({1, t(1).address()}));
    ASSERT_OK_AND_ASSIGN(to_0_, t(1).Connect({0, t(0).address()}));
    ASSERT_OK_AND_ASSIGN(source_, t(1).AllocateDevice(kSourceBytes));
    std::vector<uint8_t> bytes(kSourceBytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = Pattern(i);
    ASSERT_OK(Upload(source_.data(), bytes.data(), bytes.size()));
    ASSERT_OK_AND_ASSIGN(into_, t(0).Allocate(kSourceBytes));
    remote_ = source_.descriptor();
    ASSERT_OK(to_1_->Prepare(remote_));
    ASSERT_OK(to_1_again_->Prepare(remote_));
  }

  void TearDown() override {
    // Endpoints before their transports, rank 0's first.
    to_1_.reset();
    to_1_again_.reset();
    to_0_.reset();
  }

  DeviceTransport& t(int rank) { return *ranks_[rank].transport; }

  absl::Status Upload(void* to, const void* from, size_t bytes) {
    device::FakeDevice& device = *ranks_[1].device;
    ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, device.CreateStream());
    ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, device.CreateEvent());
    RETURN_IF_ERROR(stream->Copy(to, from, bytes));
    RETURN_IF_ERROR(stream->Record(*done));
    return done->WaitUntil(absl::Now() + kTimeout, "filling rank 1's device region");
  }

  // Progresses `ranks` (in turn) until `done`, or fails at the deadline.
  absl::Status ProgressUntil(std::vector<int> ranks, const std::function<bool()>& done,
                             const std::string& what) {
    const absl::Time deadline = absl::Now() + kTimeout;
    while (!done()) {
      for (int rank : ranks) RETURN_IF_ERROR(t(rank).Progress().status());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("waiting for ", what));
      }
    }
    return absl::OkStatus();
  }

  // A read of chunk `chunk` of rank 1's region into the same place of
  // `into_` through `endpoint`, its status into `*status` when it fires.
  absl::Status PostRead(Endpoint& endpoint, size_t chunk,
                        const std::shared_ptr<std::optional<absl::Status>>& status) {
    return endpoint.PostRead({&into_, chunk * kChunk, kChunk}, {&remote_, chunk * kChunk, kChunk},
                             [status](absl::Status s) { *status = std::move(s); });
  }

  // Rank 0's link region, where rank 1 writes its chunks and headers,
  // mapped here as rank 1 reaches it: found through rank 1's directory,
  // where rank 0 published it (the link must be up).
  absl::StatusOr<std::byte*> RankZerosLink() {
    DeviceAddressProto zero, one;
    if (!zero.ParseFromString(t(0).address()) || !one.ParseFromString(t(1).address())) {
      return absl::InternalError("a device transport's address did not parse");
    }
    ASSIGN_OR_RETURN(directory_, RemoteRegion::Parse(one.directory()));
    ASSIGN_OR_RETURN(std::byte * entries, to_1_->MapRemote({&directory_, 0, directory_.length}));
    StagingOptions options;
    options.slots = kSlots;
    options.slot_bytes = kChunk;
    ASSIGN_OR_RETURN(
        std::optional<RemoteRegion> link,
        ReadEntry(entries, 0, Incarnation(zero.host_address()), t(0).host().capabilities().backend,
                  staging_layout::LinkBytes(options)));
    if (!link.has_value()) return absl::FailedPreconditionError("rank 0's link is not up");
    link_ = *std::move(link);
    return to_0_->MapRemote({&link_, 0, link_.length});
  }

  // Whether the header of chunk `sequence` is in `link` (rank 1 wrote it).
  static bool HasHeader(const std::byte* link, uint64_t sequence) {
    absl::StatusOr<std::optional<ChunkHeader>> header = ReadHeader(
        link + staging_layout::kHeaders + ((sequence - 1) % kSlots) * staging_layout::kHeaderBytes,
        sequence, kSlots, kChunk, 1);
    return header.ok() && header->has_value();
  }

  // The first read, through both ranks: the link up both ways, and rank 0's
  // credit for its answer (chunk 1) written back, so that rank 1 has both
  // its slots for the next answers.
  absl::Status FirstRead() {
    auto fired = std::make_shared<std::optional<absl::Status>>();
    RETURN_IF_ERROR(PostRead(*to_1_, 0, fired));
    RETURN_IF_ERROR(ProgressUntil(
        {0, 1}, [&] { return fired->has_value(); }, "the first read"));
    RETURN_IF_ERROR(**fired);
    // The credit is posted as the answer lands and runs in Progress().
    for (int i = 0; i < 20; ++i) RETURN_IF_ERROR(t(0).Progress().status());
    return absl::OkStatus();
  }

  // Whether chunk `chunk` of `into_` holds rank 1's bytes.
  bool Holds(size_t chunk) const {
    for (size_t i = chunk * kChunk; i < (chunk + 1) * kChunk; ++i) {
      if (static_cast<uint8_t>(into_.data()[i]) != Pattern(i)) return false;
    }
    return true;
  }

  Rank ranks_[2];
  std::unique_ptr<Endpoint> to_1_, to_1_again_, to_0_;
  MemoryRegion source_;  // rank 1's device memory
  MemoryRegion into_;    // rank 0's host memory
  RemoteRegion remote_;
  RemoteRegion directory_, link_;  // rank 1's directory, rank 0's link
};

using Fired = std::shared_ptr<std::optional<absl::Status>>;

Fired NewFired() { return std::make_shared<std::optional<absl::Status>>(); }

TEST_F(StagedReadsTest, AVoidRequestsSlotIsReusedOnlyOnceThePeerTookIt) {
  ASSERT_OK(FirstRead());  // request 1, answered by chunk 1
  ASSERT_OK_AND_ASSIGN(const std::byte* link, RankZerosLink());
  const uint64_t answered_before = t(1).staged_answer_bytes();
  // Requests 2 and 3 fill both request slots; rank 1 has not looked.
  Fired first = NewFired(), second = NewFired();
  ASSERT_OK(PostRead(*to_1_, 1, first));
  ASSERT_OK(PostRead(*to_1_, 2, second));
  for (int i = 0; i < 20; ++i) ASSERT_OK(t(0).Progress().status());
  // Requests 4 and 5, through another endpoint closed at once: they wait
  // for a free slot, so they will go void.
  Fired void_a = NewFired(), void_b = NewFired();
  ASSERT_OK(PostRead(*to_1_again_, 3, void_a));
  ASSERT_OK(PostRead(*to_1_again_, 4, void_b));
  ASSERT_OK(to_1_again_->Close());
  ASSERT_OK(ProgressUntil(
      {0}, [&] { return void_a->has_value() && void_b->has_value(); }, "the cancelled reads"));
  EXPECT_THAT(**void_a, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(**void_b, StatusIs(absl::StatusCode::kCancelled));
  // Requests 6 and 7 go into the slots of 4 and 5 once those are free.
  Fired third = NewFired(), fourth = NewFired();
  ASSERT_OK(PostRead(*to_1_, 5, third));
  ASSERT_OK(PostRead(*to_1_, 6, fourth));
  // Rank 1 alone answers requests 2 and 3 (chunks 2 and 3, which fit
  // rank 0's slots) until both headers are in rank 0's link.
  ASSERT_OK(ProgressUntil(
      {1}, [&] { return HasHeader(link, 2) && HasHeader(link, 3); },
      "rank 1's answers to two reads"));
  // Rank 0 alone: the two reads complete, the void requests go, and then,
  // with rank 1 standing still, rank 0 runs on. A void request counted
  // done once sent would free its slot here, and requests 6 and 7 would
  // overwrite 4 and 5 before rank 1 took them.
  ASSERT_OK(ProgressUntil(
      {0}, [&] { return first->has_value() && second->has_value(); }, "two answered reads"));
  ASSERT_OK(**first);
  ASSERT_OK(**second);
  for (int i = 0; i < 200; ++i) ASSERT_OK(t(0).Progress().status());
  EXPECT_FALSE(third->has_value());
  // Both on: everything completes, the void requests unanswered but for
  // their empty answers.
  ASSERT_OK(ProgressUntil(
      {0, 1}, [&] { return third->has_value() && fourth->has_value(); },
      "the reads behind the void requests"));
  EXPECT_OK(**third);
  EXPECT_OK(**fourth);
  for (size_t chunk : {0, 1, 2, 5, 6}) EXPECT_TRUE(Holds(chunk)) << "chunk " << chunk;
  EXPECT_EQ(t(1).staged_answer_bytes(), answered_before + 4 * kChunk)
      << "rank 1 staged bytes for a void request";
  // The link goes on: more reads than slots, through it.
  std::vector<Fired> more;
  for (size_t chunk = 7; chunk < 12; ++chunk) {
    more.push_back(NewFired());
    ASSERT_OK(PostRead(*to_1_, chunk, more.back()));
  }
  ASSERT_OK(ProgressUntil(
      {0, 1}, [&] { return more.back()->has_value(); }, "five more reads"));
  for (size_t i = 0; i < more.size(); ++i) {
    ASSERT_TRUE(more[i]->has_value());
    EXPECT_OK(**more[i]);
    EXPECT_TRUE(Holds(7 + i));
  }
}

// A chunk rank 1 did not send: forged into rank 0's link as chunk 2, the
// next one rank 0 takes, while a read of 4 KiB (request 2, into chunk 1 of
// `into_`) waits for its answer and rank 1 stands still. The read fails
// with what the link found.
struct Forgery {
  const char* name;
  uint64_t address;  // into_.data() + this, or 0 for none
  uint64_t length;
  uint64_t request;
  const char* says;
};

void PrintTo(const Forgery& forgery, std::ostream* os) { *os << forgery.name; }

class ForgedChunkTest : public StagedReadsTest, public ::testing::WithParamInterface<Forgery> {};

TEST_P(ForgedChunkTest, FailsTheReadUnderWayNamingThePeer) {
  const Forgery& forgery = GetParam();
  ASSERT_OK(FirstRead());
  ASSERT_OK_AND_ASSIGN(std::byte * link, RankZerosLink());
  // Requests 2 and 3 sent (both slots), request 4 waiting for one.
  Fired waiting = NewFired(), other = NewFired(), unsent = NewFired();
  ASSERT_OK(PostRead(*to_1_, 1, waiting));
  ASSERT_OK(PostRead(*to_1_, 2, other));
  ASSERT_OK(PostRead(*to_1_, 3, unsent));
  for (int i = 0; i < 20; ++i) ASSERT_OK(t(0).Progress().status());
  const uint64_t address =
      forgery.address == 0 ? 0 : reinterpret_cast<uintptr_t>(into_.data()) + forgery.address;
  const ChunkHeader header{2, address, forgery.length, forgery.request,
                           HeaderCheck(2, address, forgery.length, forgery.request)};
  EncodeHeader(header, link + staging_layout::kHeaders + staging_layout::kHeaderBytes);
  ASSERT_OK(ProgressUntil(
      {0}, [&] { return waiting->has_value(); }, "the read under way"));
  EXPECT_THAT(**waiting,
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("staged read from rank 1 failed"),
                             HasSubstr("rank 1's staged chunk 2"), HasSubstr(forgery.says))));
  for (size_t i = kChunk; i < 2 * kChunk; ++i) {
    ASSERT_EQ(into_.data()[i], std::byte{0}) << "a forged chunk landed at byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forgeries, ForgedChunkTest,
    ::testing::Values(
        Forgery{"EmptyAnswerToAReadOfBytes", 0, 0, 2, "with nothing"},
        Forgery{"EmptyAnswerToNoRead", 0, 0, 99, "with nothing"},
        Forgery{"EmptyAnswerToAReadNotSent", 0, 0, 4, "with nothing"},
        Forgery{"AnswerOutsideItsRead", 8 * kChunk, 64, 2, "outside what that read asked for"},
        Forgery{"AnswerBeyondItsRead", kChunk + 64, kChunk, 2, "outside what that read asked for"},
        Forgery{"WriteOutsideEveryDeviceRegion", kChunk, 64, 0, "lie in no device region"}),
    [](const ::testing::TestParamInfo<Forgery>& info) { return info.param.name; });

}  // namespace
}  // namespace rdmaflow::rdma::device_path
