// The transport conformance suite on the native verbs backend, and what only
// verbs has: Close() draining flush completions before it cancels, accepted
// queue pairs freed with their peer's endpoint, the job token between real
// transports. Without an RDMA device every case skips with the reason;
// tools/rdma_tests.sh runs it inside a Soft-RoCE VM, where it must pass
// whole.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/ibverbs/ibverbs_transport.h"
#include "rdma/testing/transport_conformance.h"

namespace {

using ::rdmaflow::rdma::Endpoint;
using ::rdmaflow::rdma::LocalSlice;
using ::rdmaflow::rdma::MemoryRegion;
using ::rdmaflow::rdma::PeerInfo;
using ::rdmaflow::rdma::RemoteSlice;
using ::rdmaflow::rdma::ibverbs::IbverbsTransport;
using ::rdmaflow::rdma::ibverbs::IbverbsTransportOptions;
using ::rdmaflow::rdma::ibverbs::NotifyMode;
using ::rdmaflow::rdma::Notification;
using ::rdmaflow::rdma::testing::ConformanceBackend;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

IbverbsTransportOptions DeviceOptions(int rank) {
  IbverbsTransportOptions options;
  options.rank = rank;
  if (const char* device = std::getenv("RDMAFLOW_RXE_DEV")) {
    options.device.device = device;
  }
  // Emulated CPUs (the rxe VM) answer slowly: 2^16 * 4 us per retry.
  options.ack_timeout = 16;
  return options;
}

// The suite runs once per notification path, write with immediate (the
// default) and flag records in the peer's ring, with operations from 4 KiB
// striped over 3 queue pairs, and connected through rdmacm.
std::vector<ConformanceBackend> IbverbsBackends() {
  struct Variant {
    const char* name;
    NotifyMode mode;
    int qps_per_peer;
    bool rdmacm;
  };
  std::vector<ConformanceBackend> backends;
  for (const Variant& v :
       {Variant{"ibverbs", NotifyMode::kImmediate, 1, false},
        Variant{"ibverbs_flag", NotifyMode::kFlag, 1, false},
        Variant{"ibverbs_striped", NotifyMode::kImmediate, 3, false},
        Variant{"ibverbs_rdmacm", NotifyMode::kImmediate, 1, true}}) {
    ConformanceBackend backend;
    backend.name = v.name;
    backend.multi_process = true;
    backend.new_group = [v] {
      return [v](int rank)
                 -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
        IbverbsTransportOptions options = DeviceOptions(rank);
        options.notify = v.mode;
        options.qps_per_peer = v.qps_per_peer;
        options.stripe_min = 4096;
        options.use_rdmacm = v.rdmacm;
        return IbverbsTransport::Create(options);
      };
    };
    backends.push_back(backend);
  }
  return backends;
}

// Two transports on the device (`first` created first), or a skip.
#define CREATE_PAIR_OR_SKIP(first, second, first_options, second_options) \
  auto first##_or = IbverbsTransport::Create(first_options);              \
  if (absl::IsUnavailable(first##_or.status())) {                         \
    GTEST_SKIP() << first##_or.status();                                  \
  }                                                                       \
  ASSERT_OK(first##_or);                                                  \
  std::unique_ptr<IbverbsTransport> first = *std::move(first##_or);       \
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<IbverbsTransport> second,          \
                       IbverbsTransport::Create(second_options))

// Progresses both until `done()` or 30 s; whether `done()` holds.
template <typename Done>
bool DriveUntil(IbverbsTransport& a, IbverbsTransport& b, Done done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    EXPECT_OK(a.Progress());
    EXPECT_OK(b.Progress());
  }
  return true;
}

// GPUDirect RDMA: Soft-RoCE registers no dma-buf, and says so by name;
// an empty span is refused before the device is asked.
TEST(IbverbsGpuDirectTest, ADeviceWithoutDmaBufSupportRefusesItByName) {
  auto transport_or = IbverbsTransport::Create(DeviceOptions(0));
  if (absl::IsUnavailable(transport_or.status())) {
    GTEST_SKIP() << transport_or.status();
  }
  ASSERT_OK(transport_or);
  IbverbsTransport& transport = **transport_or;
  EXPECT_THAT(transport.RegisterDmaBuf(rdmaflow::rdma::DmaBufSpan{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  // Any descriptor will do: the driver's support is asked first.
  const int fd = memfd_create("not-a-dma-buf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
  rdmaflow::rdma::DmaBufSpan span;
  span.fd = fd;
  span.bytes = 1 << 16;
  span.address = 0x7f0000000000;
  absl::StatusOr<MemoryRegion> region = transport.RegisterDmaBuf(span);
  close(fd);
  std::printf("the dma-buf registration: %s\n", region.status().ToString().c_str());
  // rxe has no dma-buf registration; a NIC with one refuses a memfd.
  EXPECT_THAT(region.status(),
              ::testing::AnyOf(
                  StatusIs(absl::StatusCode::kUnimplemented,
                           ::testing::AllOf(HasSubstr("ibv_reg_dmabuf_mr"),
                                            HasSubstr("GPUDirect RDMA"))),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("not a dma-buf"))));
  if (transport.capabilities().description.find("rxe") != std::string::npos) {
    EXPECT_THAT(region.status(), StatusIs(absl::StatusCode::kUnimplemented,
                                          HasSubstr("rxe")));
  }
}

TEST(IbverbsCloseTest, CloseWaitsForTheFlushBeforeCancelling) {
  CREATE_PAIR_OR_SKIP(a, b, DeviceOptions(0), DeviceOptions(1));
  constexpr size_t kBig = 4 << 20;
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(kBig));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(kBig));
  std::memset(source.data(), 0x5a, kBig);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "large writes in flight"
                            : "an unsignaled tail, completed");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                         a->Connect(PeerInfo{1, b->address()}));
    int fired = 0;
    int ok = 0;
    int cancelled = 0;
    auto count = [&](absl::Status status) {
      ++fired;
      if (status.ok()) ++ok;
      if (absl::IsCancelled(status)) ++cancelled;
      EXPECT_TRUE(status.ok() || absl::IsCancelled(status)) << status;
    };
    int posted = 0;
    if (round == 0) {
      // Large writes (several work requests each on rxe) and small ones,
      // most unsignaled, still in flight when Close() comes.
      for (int i = 0; i < 8; ++i) {
        ASSERT_OK(ab->PostWrite(LocalSlice{&source, 0, kBig},
                                RemoteSlice{&target.descriptor(), 0, kBig},
                                std::nullopt, count));
        ASSERT_OK(ab->PostWrite(LocalSlice{&source, 0, 4096},
                                RemoteSlice{&target.descriptor(), 0, 4096},
                                std::nullopt, count));
        posted += 2;
      }
    } else {
      // The first request to an idle queue is signaled, the next 4 are not:
      // once they completed no completion is left for them, so the drain
      // needs the marker Close() puts behind them.
      for (int i = 0; i < 5; ++i) {
        ASSERT_OK(ab->PostWrite(LocalSlice{&source, 0, 64},
                                RemoteSlice{&target.descriptor(), 0, 64},
                                std::nullopt, count));
        ++posted;
      }
      ASSERT_OK(b->Progress());
    }
    const absl::Time start = absl::Now();
    ASSERT_OK(ab->Close());
    const absl::Duration took = absl::Now() - start;
    std::printf("round %d: Close() took %s with %d operations posted\n", round,
                absl::FormatDuration(took).c_str(), posted);
    // Drained by completions, not by the close_timeout fence.
    EXPECT_EQ(a->stats().fenced_queue_pairs, 0);
    EXPECT_EQ(fired, 0) << "callbacks fire from Progress(), not Close()";
    ASSERT_TRUE(DriveUntil(*a, *b, [&] { return fired == posted; }));
    EXPECT_EQ(ok + cancelled, posted);
    ab.reset();
    ASSERT_OK(a->Progress());
    EXPECT_EQ(fired, posted);  // Exactly once.
  }
}

TEST(IbverbsHandshakeTest, AcceptedQueuePairsAreFreedWithTheirEndpoint) {
  CREATE_PAIR_OR_SKIP(a, b, DeviceOptions(0), DeviceOptions(1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{1, b->address()}));
  ASSERT_TRUE(DriveUntil(
      *a, *b, [&] { return b->stats().listener.established == 1; }));
  EXPECT_EQ(b->stats().accepted_queue_pairs, 1u);
  ab.reset();  // Closes the handshake connection.
  ASSERT_TRUE(DriveUntil(
      *a, *b, [&] { return b->stats().retired_queue_pairs == 1; }));
  EXPECT_EQ(b->stats().accepted_queue_pairs, 0u);
  // And a new one connects.
  ASSERT_OK_AND_ASSIGN(ab, a->Connect(PeerInfo{1, b->address()}));
}

TEST(IbverbsHandshakeTest, ATransportOfAnotherJobIsRefused) {
  for (bool rdmacm : {false, true}) {
    SCOPED_TRACE(rdmacm ? "rdmacm" : "tcp handshake");
    IbverbsTransportOptions mine = DeviceOptions(1);
    mine.job_token = "job-a";
    IbverbsTransportOptions theirs = DeviceOptions(0);
    theirs.job_token = "job-b";
    mine.use_rdmacm = theirs.use_rdmacm = rdmacm;
    CREATE_PAIR_OR_SKIP(b, a, mine, theirs);
    EXPECT_THAT(a->Connect(PeerInfo{1, b->address()}),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr("job token does not verify")));
    EXPECT_EQ(b->stats().accepted_queue_pairs, 0u);
    // The TCP listener publishes its counters after it answered: wait.
    EXPECT_TRUE(DriveUntil(
        *a, *b, [&] { return b->stats().listener.refused == 1; }))
        << "refused " << b->stats().listener.refused;
  }
}

TEST(IbverbsHandshakeTest, MixedConnectModesAreNamed) {
  IbverbsTransportOptions cm = DeviceOptions(1);
  cm.use_rdmacm = true;
  CREATE_PAIR_OR_SKIP(b, a, cm, DeviceOptions(0));
  EXPECT_THAT(a->Connect(PeerInfo{1, b->address()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("same connect= parameter")));
}

// A sender may have at most notify_slots flag notifications the target has
// not consumed: then kResourceExhausted, and every one still arrives once,
// in order, as the target progresses and returns credits.
TEST(IbverbsNotifyTest, AFullRingPushesBackAndEveryNotificationArrives) {
  IbverbsTransportOptions sender = DeviceOptions(0);
  sender.notify = NotifyMode::kFlag;
  IbverbsTransportOptions small = DeviceOptions(1);
  small.notify = NotifyMode::kFlag;
  small.notify_slots = 4;
  CREATE_PAIR_OR_SKIP(a, b, sender, small);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{1, b->address()}));
  EXPECT_THAT(ab->Describe(), HasSubstr("notify flag (4-slot ring)"));
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(4096));
  constexpr uint32_t kCount = 40;
  int completed = 0;
  uint32_t next_post = 0;
  std::vector<uint32_t> received;
  bool pushed_back = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (received.size() < kCount && absl::Now() < deadline) {
    // Post until pushed back, progressing only the sender...
    while (next_post < kCount) {
      source.data()[next_post % 64] = static_cast<std::byte>(next_post);
      absl::Status posted = ab->PostWrite(
          LocalSlice{&source, next_post % 64, 1},
          RemoteSlice{&target.descriptor(), next_post % 64, 1}, next_post,
          [&](absl::Status s) {
            EXPECT_OK(s);
            ++completed;
          });
      if (absl::IsResourceExhausted(posted)) {
        EXPECT_THAT(posted.message(), HasSubstr("its ring is full"));
        pushed_back = true;
        break;
      }
      ASSERT_OK(posted);
      ++next_post;
      ASSERT_OK(a->Progress());
    }
    // ...then let the target consume, checking the byte each one guards.
    ASSERT_OK(b->Progress());
    ASSERT_OK(a->Progress());
    while (std::optional<Notification> n = b->PollNotification()) {
      EXPECT_EQ(n->peer_rank, 0);
      EXPECT_EQ(n->value, received.size());
      EXPECT_EQ(target.data()[n->value % 64], static_cast<std::byte>(n->value));
      received.push_back(n->value);
    }
  }
  EXPECT_TRUE(pushed_back) << "40 notifications never filled a 4-slot ring";
  ASSERT_EQ(received.size(), kCount);
  ASSERT_TRUE(DriveUntil(*a, *b, [&] { return completed == int{kCount}; }));
  ASSERT_OK(b->Progress());
  EXPECT_FALSE(b->PollNotification().has_value()) << "delivered twice";
}

// Where either side takes only write with immediate, notifications use it.
TEST(IbverbsNotifyTest, MixedModesFallBackToWriteWithImmediate) {
  for (bool sender_flags : {true, false}) {
    SCOPED_TRACE(sender_flags ? "flag sender, imm target"
                              : "imm sender, flag target");
    IbverbsTransportOptions sender = DeviceOptions(0);
    IbverbsTransportOptions target_options = DeviceOptions(1);
    sender.notify = target_options.notify = NotifyMode::kFlag;
    (sender_flags ? target_options : sender).notify = NotifyMode::kImmediate;
    CREATE_PAIR_OR_SKIP(a, b, sender, target_options);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                         a->Connect(PeerInfo{1, b->address()}));
    EXPECT_THAT(ab->Describe(), HasSubstr("notify imm"));
    ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(64));
    ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_OK(ab->PostWrite(LocalSlice{&source, 0, 8},
                              RemoteSlice{&target.descriptor(), 0, 8}, 100 + i,
                              [](absl::Status s) { EXPECT_OK(s); }));
    }
    std::vector<uint32_t> got;
    ASSERT_TRUE(DriveUntil(*a, *b, [&] {
      while (std::optional<Notification> n = b->PollNotification()) {
        got.push_back(n->value);
      }
      return got.size() == 3;
    }));
    EXPECT_EQ(got, (std::vector<uint32_t>{100, 101, 102}));
  }
}

// With completion events, a wait sleeps until a completion or a write with
// immediate arrives, and a quiet one ends at its timeout.
TEST(IbverbsEventsTest, AWaitEndsWhenACompletionOrNotificationArrives) {
  IbverbsTransportOptions sender = DeviceOptions(0);
  sender.completion_events = true;
  IbverbsTransportOptions target_options = DeviceOptions(1);
  target_options.completion_events = true;
  CREATE_PAIR_OR_SKIP(a, b, sender, target_options);
  EXPECT_THAT(b->capabilities().description, HasSubstr("completion events"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{1, b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  ASSERT_OK(b->Progress());
  EXPECT_FALSE(b->WaitForActivity(absl::Milliseconds(20)))
      << "nothing was sent: the wait must end at its timeout";
  for (uint32_t round = 0; round < 3; ++round) {
    bool done = false;
    ASSERT_OK(ab->PostWrite(LocalSlice{&source, 0, 8},
                            RemoteSlice{&target.descriptor(), 0, 8}, round,
                            [&](absl::Status s) {
                              EXPECT_OK(s);
                              done = true;
                            }));
    // Woken, not timed out: 60 s is far beyond any delivery.
    ASSERT_TRUE(b->WaitForActivity(absl::Seconds(60))) << round;
    ASSERT_OK(b->Progress());
    std::optional<Notification> note = b->PollNotification();
    ASSERT_TRUE(note.has_value()) << "woken without the notification";
    EXPECT_EQ(note->value, round);
    while (!done) {
      ASSERT_TRUE(a->WaitForActivity(absl::Seconds(60))) << round;
      ASSERT_OK(a->Progress());
    }
  }
}

// Striped writes (over 3 queue pairs) and small ones interleaved, with
// notifications: each arrives once, in post order, after all of its bytes,
// in both notification modes; a flush covers every queue pair.
TEST(IbverbsStripingTest, NotificationsKeepTheirOrderBehindStripes) {
  for (NotifyMode mode : {NotifyMode::kImmediate, NotifyMode::kFlag}) {
    SCOPED_TRACE(mode == NotifyMode::kFlag ? "flag" : "imm");
    IbverbsTransportOptions options0 = DeviceOptions(0);
    IbverbsTransportOptions options1 = DeviceOptions(1);
    for (IbverbsTransportOptions* o : {&options0, &options1}) {
      o->notify = mode;
      o->qps_per_peer = 3;
      o->stripe_min = 64 << 10;
    }
    CREATE_PAIR_OR_SKIP(a, b, options0, options1);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                         a->Connect(PeerInfo{1, b->address()}));
    EXPECT_THAT(ab->Describe(), HasSubstr("3 queue pairs"));
    constexpr size_t kBig = 1 << 20;
    constexpr int kOps = 12;
    ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(kBig * kOps));
    ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(kBig * kOps));
    for (size_t i = 0; i < kBig * kOps; ++i) {
      source.data()[i] = static_cast<std::byte>((i * 7 + i / 4096) & 0xff);
    }
    int completed = 0;
    for (int op = 0; op < kOps; ++op) {
      // Big (striped) and small (first queue pair only) alternate.
      const size_t length = op % 2 == 0 ? kBig - 4096 * op : 100 + op;
      ASSERT_OK(ab->PostWrite(
          LocalSlice{&source, op * kBig, length},
          RemoteSlice{&target.descriptor(), op * kBig, length},
          static_cast<uint32_t>(op), [&](absl::Status s) {
            EXPECT_OK(s);
            ++completed;
          }));
    }
    bool flushed = false;
    ASSERT_OK(ab->PostFlush([&](absl::Status s) {
      EXPECT_OK(s);
      EXPECT_EQ(completed, kOps) << "the flush fired before a write";
      flushed = true;
    }));
    int next = 0;
    ASSERT_TRUE(DriveUntil(*a, *b, [&] {
      while (std::optional<Notification> n = b->PollNotification()) {
        EXPECT_EQ(n->value, static_cast<uint32_t>(next)) << "out of order";
        const size_t length = next % 2 == 0 ? kBig - 4096 * next : 100 + next;
        EXPECT_EQ(0, std::memcmp(target.data() + next * kBig,
                                 source.data() + next * kBig, length))
            << "notification " << next << " came before its bytes";
        ++next;
      }
      return next == kOps && flushed;
    }));
    EXPECT_EQ(completed, kOps);
  }
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Ibverbs, IbverbsBackends)
