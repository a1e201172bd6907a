// File: ucx_flag_notify_test.cc
// Notified writes to a same-host peer as flags in its inbox (flag_inbox.h),
// end to end over UCX shared memory: used where both sides take them,
// active messages elsewhere; every notification arrives once, in order and
// after its data, either way. The hostile cases write into the target's
// inbox as a same-host peer could: a forged consumed count fails the
// writer's endpoint (kDataLoss), a lane naming no rank is refused and
// counted, and a writer that finds every lane taken falls back to active
// messages. Data that goes through UCX (a region the peer registered, and
// every notified write after such a write) is flushed before its record.
// Two transports of one process: the inbox a worker address names is this
// process's memory.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "common/peer_copy.h"
#include "common/shared_word.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/ucx/envelope.h"
#include "rdma/ucx/flag_inbox.h"
#include "rdma/transport_registry.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma::ucx {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kWrites = 1500;  // Almost three laps of a 512-slot lane.

absl::StatusOr<std::unique_ptr<UcxTransport>> Make(
    int rank, const std::string& tls, bool flags = true,
    size_t streaming_copy_min = kDefaultStreamingCopyMinBytes) {
  UcxTransportOptions options;
  options.rank = rank;
  options.tls = tls;
  options.net_devices = "lo";
  options.flag_notifications = flags;
  options.streaming_copy_min = streaming_copy_min;
  return UcxTransport::Create(options);
}

// `b`'s inbox, in this process.
std::byte* InboxOf(const UcxTransport& b) {
  absl::StatusOr<WorkerAddress> address = UnwrapWorkerAddress(b.address());
  if (!address.ok() || !address->inbox.has_value()) return nullptr;
  return reinterpret_cast<std::byte*>(address->inbox->address);
}

// a writes kWrites notified writes, value i carrying i + 1 at offset 8i
// of `target` (b's region, whose bytes lie at `bytes` here); b checks each
// notification's data when it polls it, and their order. Every write
// completes once, never inside its post.
void ExpectNotificationsInOrderAfterTheirData(UcxTransport& a, UcxTransport& b, Endpoint& ab,
                                              const MemoryRegion& target,
                                              const std::byte* bytes) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a.Allocate(8 * kWrites));
  const RemoteRegion remote = target.descriptor();
  for (uint64_t i = 0; i < kWrites; ++i) {
    const uint64_t value = i + 1;
    std::memcpy(local.data() + 8 * i, &value, 8);
  }
  int posted = 0, completed = 0, noticed = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (noticed < kWrites || completed < kWrites) {
    ASSERT_LT(absl::Now(), deadline) << posted << " posted, " << noticed << " noticed";
    while (posted < kWrites) {
      const size_t at = 8 * static_cast<size_t>(posted);
      const int before = completed;
      absl::Status status = ab.PostWrite({&local, at, 8}, {&remote, at, 8},
                                         static_cast<uint32_t>(posted),
                                         [&](absl::Status s) {
                                           EXPECT_OK(s);
                                           ++completed;
                                         });
      ASSERT_EQ(completed, before) << "a completion fired inside its post";
      if (absl::IsResourceExhausted(status)) break;  // b has not caught up
      ASSERT_OK(status);
      ++posted;
    }
    ASSERT_OK(a.Progress().status());
    ASSERT_OK(b.Progress().status());
    while (std::optional<Notification> n = b.PollNotification()) {
      ASSERT_EQ(n->peer_rank, 0);
      ASSERT_EQ(n->value, static_cast<uint32_t>(noticed));
      uint64_t seen = 0;
      std::memcpy(&seen, bytes + 8 * n->value, 8);
      ASSERT_EQ(seen, n->value + 1) << "the notification came before its data";
      ++noticed;
    }
  }
  EXPECT_EQ(completed, kWrites);
  EXPECT_EQ(noticed, kWrites);
  EXPECT_EQ(b.malformed_notifications(), 0u);
  EXPECT_EQ(b.dropped_notifications(), 0u);
}

// The same into a region b allocated (shared memory: copies where it maps).
void ExpectNotificationsInOrderAfterTheirData(UcxTransport& a, UcxTransport& b, Endpoint& ab) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b.Allocate(8 * kWrites));
  ExpectNotificationsInOrderAfterTheirData(a, b, ab, target, target.data());
}

// Two transports over shared memory, rank 0 (the writer) and rank 1.
class UcxFlagNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(a, Make(0, "shm"));
    ASSERT_OK_AND_ASSIGN(b, Make(1, "shm"));
  }
  std::unique_ptr<UcxTransport> a;
  std::unique_ptr<UcxTransport> b;
};

TEST_F(UcxFlagNotifyTest, ASameHostPeerOverSharedMemoryGetsFlags) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  EXPECT_THAT(ab->Describe(), StartsWith("notify flag (an inbox of 64 lanes;"));
  ExpectNotificationsInOrderAfterTheirData(*a, *b, *ab);
  // The lane was claimed at the first notified write.
  EXPECT_THAT(ab->Describe(), StartsWith("notify flag (lane 0 of 64, 512 slots)"));
}

// A region b registered (its own heap memory) does not map: the data goes
// by UCX put, and the record follows the put's flush.
TEST_F(UcxFlagNotifyTest, DataThroughUcxIsFlushedBeforeItsRecord) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  std::vector<std::byte> heap(8 * kWrites);
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Register(absl::MakeSpan(heap)));
  ExpectNotificationsInOrderAfterTheirData(*a, *b, *ab, target, heap.data());
  EXPECT_THAT(ab->Describe(), StartsWith("notify flag (lane 0"));
}

// Once a plain write went through UCX, later notified writes into mapped
// memory take the flushed path too: each still arrives after its data.
TEST_F(UcxFlagNotifyTest, AfterAWriteThroughUcxNotifiedCopiesWaitForTheFlush) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  std::vector<std::byte> heap(4096, std::byte{0});
  ASSERT_OK_AND_ASSIGN(MemoryRegion registered, b->Register(absl::MakeSpan(heap)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(4096));
  std::memset(local.data(), 0x5a, 4096);
  const RemoteRegion remote = registered.descriptor();
  bool written = false;
  ASSERT_OK(ab->PostWrite({&local, 0, 4096}, {&remote, 0, 4096}, std::nullopt,
                          [&](absl::Status s) {
                            EXPECT_OK(s);
                            written = true;
                          }));
  ExpectNotificationsInOrderAfterTheirData(*a, *b, *ab);
  EXPECT_TRUE(written);
  EXPECT_EQ(heap[4095], std::byte{0x5a});
}

// Copies into the mapped peer with streaming stores (from 128 bytes here):
// every byte of notified, flagged (unbound, bound, bound and inline) and
// plain writes of odd sizes at odd offsets arrives, nothing around them is
// written, and each of them streamed; each notification and flag is seen
// with its whole write in place.
TEST(UcxStreamingCopyTest, StreamedWritesArriveWholeBeforeTheirNotifications) {
  ASSERT_OK_AND_ASSIGN(auto a, Make(0, "shm", true, /*streaming_copy_min=*/128));
  ASSERT_OK_AND_ASSIGN(auto b, Make(1, "shm"));
  EXPECT_THAT(a->capabilities().description,
              HasSubstr(StreamingCopyAvailable()
                            ? "streaming copies to same-host peers from 128 bytes"
                            : "plain copies to same-host peers"));
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  constexpr size_t kBytes = 1 << 16;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(kBytes));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(kBytes + 64));
  const RemoteRegion remote = target.descriptor();
  int completed = 0;
  auto count = [&](absl::Status s) {
    EXPECT_OK(s);
    ++completed;
  };
  struct Case {
    size_t src, dst, bytes;
  };
  const Case cases[] = {{0, 0, 128}, {3, 17, 129}, {64, 5, 1000}, {1, 63, 4097},
                        {7, 0, 40000}, {0, 33, kBytes - 64}};
  for (int round = 0; round < 3; ++round) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat("round ", round, ": ", c.bytes, " bytes from +", c.src,
                                " to +", c.dst));
      for (size_t i = 0; i < kBytes; ++i) {
        local.data()[i] = static_cast<std::byte>((i * 13 + round * 7 + c.bytes) % 251);
      }
      std::memset(target.data(), 0xee, kBytes + 64);
      const int before = completed;
      const uint64_t streamed = StreamedCopiesOnThisThread();
      // Flagged: the flag word right behind the data, aligned; unbound,
      // bound and posted, or bound and inline by turns.
      const size_t flag_at = (c.dst + c.bytes + 7) / 8 * 8;
      const uint64_t flag = 1000 + round;
      if (round == 0) {
        ASSERT_OK(ab->PostWriteWithFlag({&local, c.src, c.bytes}, {&remote, c.dst, c.bytes},
                                        {&remote, flag_at, 8}, flag, count));
      } else {
        ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> bound,
                             ab->BindFlaggedWrite({&local, c.src, c.bytes},
                                                  {&remote, c.dst, c.bytes},
                                                  {&remote, flag_at, 8}));
        if (round == 1) {
          ASSERT_OK(bound->Post(flag, count));
        } else {
          ASSERT_OK_AND_ASSIGN(const bool inline_done, bound->TryPostInline(flag));
          ASSERT_TRUE(inline_done) << "a mapped peer's write was not done inline";
          ++completed;  // an inline write fires no completion
        }
      }
      ASSERT_EQ(LoadSharedWord(target.data() + flag_at), flag);
      for (size_t i = 0; i < c.bytes; ++i) {
        ASSERT_EQ(target.data()[c.dst + i], local.data()[c.src + i]) << "flagged, byte " << i;
      }
      for (size_t i = c.dst + c.bytes; i < flag_at; ++i) {
        ASSERT_EQ(target.data()[i], std::byte{0xee}) << "byte " << i << " before the flag";
      }
      ASSERT_EQ(target.data()[flag_at + 8], std::byte{0xee});
      if (c.dst > 0) {
        ASSERT_EQ(target.data()[c.dst - 1], std::byte{0xee});
      }
      // Notified, then plain, each over the other's bytes.
      for (bool notified : {true, false}) {
        for (size_t i = 0; i < kBytes; i += 4096) local.data()[i + c.src % 4096] ^= std::byte{1};
        std::optional<uint32_t> value;
        if (notified) value = static_cast<uint32_t>(round);
        ASSERT_OK(ab->PostWrite({&local, c.src, c.bytes}, {&remote, c.dst, c.bytes}, value,
                                count));
        if (notified) {
          std::optional<Notification> n;
          const absl::Time deadline = absl::Now() + absl::Seconds(30);
          while (!(n = b->PollNotification()).has_value()) {
            ASSERT_LT(absl::Now(), deadline) << "no notification";
            ASSERT_OK(b->Progress().status());
          }
          ASSERT_EQ(n->value, static_cast<uint32_t>(round));
        }
        for (size_t i = 0; i < c.bytes; ++i) {
          ASSERT_EQ(target.data()[c.dst + i], local.data()[c.src + i])
              << (notified ? "notified" : "plain") << ", byte " << i;
        }
        if (c.dst > 0) {
          ASSERT_EQ(target.data()[c.dst - 1], std::byte{0xee});
        }
      }
      ASSERT_OK(a->Progress().status());
      ASSERT_EQ(completed, before + 3);
      // Each of the three writes streamed where streaming is built in.
      EXPECT_EQ(StreamedCopiesOnThisThread(), streamed + (StreamingCopyAvailable() ? 3 : 0));
    }
  }
}

TEST(UcxStreamingCopyTest, TheThresholdIsAParameterInKiB) {
  TransportRegistry registry;
  ASSERT_OK(RegisterUcxTransport(registry));
  TransportConfig config;
  config.params = {{"tls", "shm"}, {"streaming_copy_kb", "256"}};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> t, registry.Create("ucx", config));
  if (StreamingCopyAvailable()) {
    EXPECT_THAT(t->capabilities().description,
                HasSubstr("streaming copies to same-host peers from 256 KiB"));
  }
  config.params["streaming_copy_kb"] = "0";
  ASSERT_OK_AND_ASSIGN(t, registry.Create("ucx", config));
  EXPECT_THAT(t->capabilities().description, HasSubstr("plain copies to same-host peers"));
  for (const std::string bad : {"-1", "x", "", "2000000000"}) {
    config.params["streaming_copy_kb"] = bad;
    EXPECT_THAT(registry.Create("ucx", config),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("streaming_copy_kb")))
        << bad;
  }
}

TEST(UcxNotifyPathTest, ActiveMessagesWhereFlagsAreOffOrCannotBeMapped) {
  struct Case {
    const char* tls;
    bool a_flags, b_flags;
    const char* why;
  };
  for (const Case& c : {Case{"shm", false, true, "notify=am"},
                        Case{"shm", true, false, "the peer offers no flag inbox"},
                        Case{"tcp", true, true, "no shared memory in tls"}}) {
    SCOPED_TRACE(absl::StrCat(c.tls, " ", c.a_flags, " ", c.b_flags));
    ASSERT_OK_AND_ASSIGN(auto a, Make(0, c.tls, c.a_flags));
    ASSERT_OK_AND_ASSIGN(auto b, Make(1, c.tls, c.b_flags));
    ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
    EXPECT_THAT(ab->Describe(), StartsWith(absl::StrCat("notify am (", c.why, ")")));
    ExpectNotificationsInOrderAfterTheirData(*a, *b, *ab);
  }
}

TEST_F(UcxFlagNotifyTest, AWriterFindingEveryLaneTakenFallsBackToActiveMessages) {
  std::byte* inbox = InboxOf(*b);
  ASSERT_NE(inbox, nullptr);
  StoreSharedWord(inbox, FlagInboxLayout::kDefaultLanes);  // as 64 peers would
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  ExpectNotificationsInOrderAfterTheirData(*a, *b, *ab);
  EXPECT_THAT(ab->Describe(), StartsWith("notify am (all 64 lanes of its inbox are taken)"));
}

TEST_F(UcxFlagNotifyTest, AForgedConsumedCountFailsTheWritersEndpoint) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  const RemoteRegion remote = target.descriptor();
  int completed = 0;
  auto post = [&] {
    return ab->PostWrite({&local, 0, 8}, {&remote, 0, 8}, 1u, [&](absl::Status s) {
      EXPECT_OK(s);
      ++completed;
    });
  };
  // b never progresses: the lane fills.
  for (uint32_t i = 0; i < FlagInboxLayout::kDefaultSlots; ++i) ASSERT_OK(post());
  EXPECT_THAT(post(), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("rank 1")));
  // b "says" it consumed more than a ever posted.
  const FlagInboxLayout layout;
  StoreSharedWord(InboxOf(*b) + layout.ConsumedOffset(0), 100000);
  EXPECT_THAT(post(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 1")));
  // Nothing more goes to that peer.
  EXPECT_THAT(post(), StatusIs(absl::StatusCode::kDataLoss));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (completed < static_cast<int>(FlagInboxLayout::kDefaultSlots)) {
    ASSERT_LT(absl::Now(), deadline);
    ASSERT_OK(a->Progress().status());
  }
}

// A descriptor that keeps a genuine key but announces another extent (a
// length past the segment, an address far from it) is refused by name, on
// its first use and after the genuine one was used (the cached region must
// not stand for it), and nothing is copied or posted.
TEST_F(UcxFlagNotifyTest, AForgedExtentUnderAGenuineKeyIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  const RemoteRegion genuine = target.descriptor();
  RemoteRegion longer = genuine;
  longer.length = uint64_t{1} << 40;
  RemoteRegion elsewhere = genuine;
  elsewhere.address += uint64_t{1} << 40;
  int completed = 0;
  auto write = [&](const RemoteRegion& region) {
    return ab->PostWrite({&local, 0, 8}, {&region, 0, 8}, std::nullopt,
                         [&](absl::Status s) {
                           EXPECT_OK(s);
                           ++completed;
                         });
  };
  for (const RemoteRegion* forged : {&longer, &elsewhere}) {
    ASSERT_OK(write(genuine));
    EXPECT_THAT(write(*forged), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("rank 1")));
    EXPECT_THAT(ab->PostRead({&local, 0, 8}, {forged, 0, 8}, [](absl::Status) {}),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(ab->Prepare(*forged), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  ASSERT_OK(a->Progress().status());
  EXPECT_EQ(completed, 2);  // the two genuine writes, nothing else
}

// After Close(), the keys (the inbox's among them) are gone: preparing a
// region or posting is an error, never a use of what was released.
TEST_F(UcxFlagNotifyTest, AClosedEndpointPreparesAndPostsNothing) {
  ASSERT_OK_AND_ASSIGN(auto ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  const RemoteRegion remote = target.descriptor();
  ASSERT_OK(ab->Prepare(remote));
  ASSERT_OK(ab->Close());
  EXPECT_THAT(ab->Prepare(remote), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ab->PostWrite({&local, 0, 8}, {&remote, 0, 8}, 1u, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ab->PostRead({&local, 0, 8}, {&remote, 0, 8}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(a->Progress().status());
}

TEST_F(UcxFlagNotifyTest, ALaneWhoseOwnerNamesNoRankIsRefusedAndCounted) {
  std::byte* inbox = InboxOf(*b);
  ASSERT_NE(inbox, nullptr);
  const FlagInboxLayout layout;
  StoreSharedWord(inbox, 1);
  StoreSharedWord(inbox + layout.RingOffset(0), NotifyRecord(1, 5));
  StoreSharedWord(inbox + layout.OwnerOffset(0),
                  (FlagInboxLayout::kOwnerMagic << 32) | 0xfffffff0u);
  ASSERT_OK(b->Progress().status());
  ASSERT_OK(b->Progress().status());
  EXPECT_FALSE(b->PollNotification().has_value());
  EXPECT_EQ(b->malformed_notifications(), 1u);
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
