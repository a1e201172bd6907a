// File: staged_reads_test.cc
// Staged reads cancelled before their request went (rdma/device/staging.h)
// between two device transports over the in-process loopback backend, each
// on a fake device of its own and claiming a host of its own, progressed
// by hand: rank 0 runs on while rank 1 stands still, so a request slot
// rank 0 wrote again before rank 1 took what was in it shows, every time.
// A void request is taken by the peer, answered by an empty chunk, and its
// slot is reused only after that; the reads behind it are answered whole.
#include <cstring>
#include <memory>
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
#include "rdma/device/device_transport.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::StatusIs;

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
};

using Fired = std::shared_ptr<std::optional<absl::Status>>;

Fired NewFired() { return std::make_shared<std::optional<absl::Status>>(); }

TEST_F(StagedReadsTest, AVoidRequestsSlotIsReusedOnlyOnceThePeerTookIt) {
  // The link up, both ways (request 1).
  Fired warmup = NewFired();
  ASSERT_OK(PostRead(*to_1_, 0, warmup));
  ASSERT_OK(ProgressUntil(
      {0, 1}, [&] { return warmup->has_value(); }, "the first read"));
  ASSERT_OK(**warmup);
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
  // Rank 1 alone answers requests 2 and 3 (both chunks fit rank 0's
  // slots): their copies out of its device memory end, then its posts go
  // (the loopback backend runs them in Progress()).
  ASSERT_OK(ProgressUntil(
      {1},
      [&] {
        const absl::StatusOr<bool> idle = ranks_[1].device->Idle();
        return t(1).staged_answer_bytes() == answered_before + 2 * kChunk && idle.ok() && *idle;
      },
      "rank 1's answers to two reads"));
  for (int i = 0; i < 50; ++i) ASSERT_OK(t(1).Progress().status());
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

}  // namespace
}  // namespace rdmaflow::rdma::device_path
