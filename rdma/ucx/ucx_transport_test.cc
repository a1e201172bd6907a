// UcxTransport's options: the `net_devices` parameter and its loopback
// default for TCP (shared memory unaffected), and endpoint teardown.
#include "rdma/ucx/ucx_transport.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/shared_word.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/transport_registry.h"
#include "rdma/ucx/net_devices.h"
#include "ucs/debug/log_def.h"

namespace rdmaflow::rdma::ucx {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Tests run with UCX_NET_DEVICES unset unless they set it.
class UcxTransportTest : public ::testing::Test {
 protected:
  // The UCX variables the tests set, as the environment had them.
  static constexpr const char* kVariables[] = {"UCX_NET_DEVICES", "UCX_TCP_TX_SEG_SIZE",
                                               "UCX_TCP_RX_SEG_SIZE"};
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(value == nullptr ? std::nullopt : std::optional<std::string>(value));
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i].has_value()) {
        setenv(kVariables[i], saved_[i]->c_str(), 1);
      } else {
        unsetenv(kVariables[i]);
      }
    }
  }
  std::vector<std::optional<std::string>> saved_;
};

absl::StatusOr<std::unique_ptr<UcxTransport>> Make(int rank,
                                                   const std::string& tls,
                                                   const std::string& devices) {
  UcxTransportOptions options;
  options.rank = rank;
  options.tls = tls;
  options.net_devices = devices;
  return UcxTransport::Create(options);
}

// The interfaces of the endpoint's TCP lanes, from ucp_ep_print_info():
// "lane[0]:  0:tcp/lo.0 md[0] ...".
std::vector<std::string> TcpInterfaces(const std::string& description) {
  std::vector<std::string> interfaces;
  for (absl::string_view line : absl::StrSplit(description, '\n')) {
    if (!absl::StrContains(line, "lane[")) continue;
    const size_t at = line.find(":tcp/");
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + 5);
    interfaces.emplace_back(rest.substr(0, rest.find('.')));
  }
  return interfaces;
}

// Connects `a` to `b`, writes 4 KiB with a notification and reads it back.
absl::Status RoundTrip(Transport& a, Transport& b, std::string* lanes) {
  absl::StatusOr<std::unique_ptr<Endpoint>> ab =
      a.Connect(PeerInfo{b.rank(), b.address()});
  if (!ab.ok()) return ab.status();
  absl::StatusOr<MemoryRegion> local = a.Allocate(8192);
  absl::StatusOr<MemoryRegion> remote = b.Allocate(4096);
  if (!local.ok()) return local.status();
  if (!remote.ok()) return remote.status();
  for (size_t i = 0; i < 4096; ++i) local->data()[i] = std::byte(i * 7);
  const absl::Time deadline = absl::Now() + kTimeout;
  // Both sides progress: TCP needs the target's progress too.
  auto drive = [&](const std::function<bool()>& done,
                   const char* what) -> absl::Status {
    while (!done()) {
      if (absl::Now() > deadline) return absl::DeadlineExceededError(what);
      if (absl::Status s = a.Progress().status(); !s.ok()) return s;
      if (absl::Status s = b.Progress().status(); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  bool noted = false;
  int writes = 0;
  absl::Status write_status;
  absl::Status posted =
      (*ab)->PostWrite({&*local, 0, 4096}, {&remote->descriptor(), 0, 4096}, 7u,
                       [&](absl::Status s) {
                         write_status = s;
                         ++writes;
                       });
  if (!posted.ok()) return posted;
  if (absl::Status s = drive(
          [&] {
            if (b.PollNotification().has_value()) noted = true;
            return writes > 0 && noted;
          },
          "write");
      !s.ok()) {
    return s;
  }
  if (!write_status.ok()) return write_status;
  int reads = 0;
  absl::Status read_status;
  posted =
      (*ab)->PostRead({&*local, 4096, 4096}, {&remote->descriptor(), 0, 4096},
                      [&](absl::Status s) {
                        read_status = s;
                        ++reads;
                      });
  if (!posted.ok()) return posted;
  if (absl::Status s = drive([&] { return reads > 0; }, "read"); !s.ok()) {
    return s;
  }
  if (!read_status.ok()) return read_status;
  if (std::memcmp(local->data(), local->data() + 4096, 4096) != 0) {
    return absl::DataLossError("read back other bytes");
  }
  if (lanes != nullptr) *lanes = (*ab)->Describe();
  absl::Status closed = (*ab)->Close();
  return closed;
}

TEST_F(UcxTransportTest, TcpUsesOnlyTheLoopbackInterfaceByDefault) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "tcp", ""));
  EXPECT_THAT(a->capabilities().description, HasSubstr("NET_DEVICES=lo"));
  std::string lanes;
  ASSERT_OK(RoundTrip(*a, *b, &lanes));
  std::vector<std::string> interfaces = TcpInterfaces(lanes);
  EXPECT_THAT(interfaces, ::testing::Not(::testing::IsEmpty())) << lanes;
  EXPECT_THAT(interfaces, ::testing::Each(std::string("lo"))) << lanes;
}

TEST_F(UcxTransportTest, NetDevicesPicksTheInterfaces) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", "lo"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "tcp", "lo"));
  EXPECT_THAT(a->capabilities().description, HasSubstr("NET_DEVICES=lo"));
  std::string lanes;
  ASSERT_OK(RoundTrip(*a, *b, &lanes));
  EXPECT_THAT(TcpInterfaces(lanes), ::testing::Each(std::string("lo")));
}

TEST_F(UcxTransportTest, TheEnvironmentVariableAppliesWhenTheOptionIsUnset) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", ""));
  EXPECT_THAT(a->capabilities().description,
              HasSubstr("NET_DEVICES=UCX_NET_DEVICES=lo"));
}

TEST_F(UcxTransportTest, LoopbackNetDevicesLeaveSharedMemoryAlone) {
  for (const std::string& tls : {std::string("shm"), std::string("")}) {
    SCOPED_TRACE(tls.empty() ? "default tls" : tls);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, tls, "lo"));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, tls, "lo"));
    std::string lanes;
    ASSERT_OK(RoundTrip(*a, *b, &lanes));
    if (tls == "shm") {
      EXPECT_THAT(lanes, ::testing::Not(HasSubstr("tcp/"))) << lanes;
    }
  }
}

// Over shared memory a peer's allocated region maps into this process:
// stores through the mapping are the peer's memory. Over TCP nothing maps.
TEST_F(UcxTransportTest, ASameHostPeersSharedMemoryMapsAndTcpDoesNot) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "shm", ""));
  EXPECT_TRUE(a->capabilities().maps_peer_memory);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion region, b->Allocate(4096));
  std::memset(region.data(), 0, region.size());
  const RemoteRegion descriptor = region.descriptor();
  ASSERT_OK_AND_ASSIGN(std::byte* mapped, ab->MapRemote({&descriptor, 64, 128}));
  std::memset(mapped, 0x5A, 128);
  EXPECT_EQ(region.data()[63], std::byte{0});
  EXPECT_EQ(region.data()[64], std::byte{0x5A});
  EXPECT_EQ(region.data()[191], std::byte{0x5A});
  EXPECT_EQ(region.data()[192], std::byte{0});
  EXPECT_THAT(ab->MapRemote({&descriptor, 4000, 128}),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside")));
  EXPECT_THAT(ab->MapRemote({&descriptor, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("length 0")));
  ASSERT_OK(ab->Close());
  EXPECT_THAT(ab->MapRemote({&descriptor, 0, 8}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> c, Make(0, "tcp", "lo"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> d, Make(1, "tcp", "lo"));
  // The capability says so up front: only shared-memory transports map.
  EXPECT_FALSE(c->capabilities().maps_peer_memory);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> cd, c->Connect({d->rank(), d->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion far, d->Allocate(4096));
  const RemoteRegion far_descriptor = far.descriptor();
  EXPECT_THAT(cd->MapRemote({&far_descriptor, 0, 64}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("use posts")));
  ASSERT_OK(cd->Close());
}

// One TCP connection carries every put in post order (UCX 1.13); shared
// memory (CMA for large puts, a copy or the flag inbox for the rest) does
// not promise that, nor do several lanes (ep_lanes_test).
TEST_F(UcxTransportTest, WritesAreOrderedOverOneTcpLaneOnly) {
  struct Case {
    const char* tls;
    bool ordered;
  };
  for (const Case& c : {Case{"tcp", true}, Case{"shm", false}}) {
    SCOPED_TRACE(absl::StrCat("tls='", c.tls, "'"));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, c.tls, "lo"));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, c.tls, "lo"));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab, a->Connect({b->rank(), b->address()}));
    EXPECT_EQ(ab->OrdersWrites(), c.ordered) << ab->Describe();
    ASSERT_OK(ab->Close());
  }
}

// Over TCP alone the worker's events announce everything: the receiver
// sleeps in WaitForActivity() with a deadline it never reaches, and each
// wait ends because something arrived, until the notified write has. Over
// shared memory (puts raise no event) the transport does not say so.
TEST_F(UcxTransportTest, OverTcpAloneTheWaitIsWokenByWhatArrives) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> shm, Make(0, "shm", "lo"));
    EXPECT_FALSE(shm->AnnouncesActivity());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> both, Make(0, "shm,tcp", "lo"));
    EXPECT_FALSE(both->AnnouncesActivity());
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", "lo"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "tcp", "lo"));
  EXPECT_TRUE(a->AnnouncesActivity());
  EXPECT_TRUE(b->AnnouncesActivity());
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, b->Allocate(4096));
  std::memset(local.data(), 0x6B, 4096);
  // Within the test's size (small: 60 s), each wait of 5 s at most.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  constexpr absl::Duration kWait = absl::Seconds(5);
  // The writer, on a thread of its own, progresses (waiting on its own
  // events) until the notification has arrived and its write completed;
  // `finished` ends the reader's waits where it gives up first.
  absl::Status written = absl::DeadlineExceededError("the write never completed");
  std::atomic<bool> done{false}, received{false}, finished{false};
  std::thread writer([&] {
    absl::Cleanup finish = [&] { finished.store(true); };
    absl::StatusOr<std::unique_ptr<Endpoint>> ab = a->Connect(PeerInfo{1, b->address()});
    if (!ab.ok()) {
      written = ab.status();
      return;
    }
    absl::Status posted = (*ab)->PostWrite({&local, 0, 4096}, {&remote.descriptor(), 0, 4096},
                                           9u, [&](absl::Status s) {
                                             written = s;
                                             done.store(true);
                                           });
    if (!posted.ok()) {
      written = posted;
      return;
    }
    while ((!received.load() || !done.load()) && absl::Now() < deadline) {
      absl::StatusOr<int> fired = a->Progress();
      if (!fired.ok()) {
        written = fired.status();
        return;
      }
      if (*fired == 0) a->WaitForActivity(absl::Milliseconds(100));
    }
    if (!done.load()) written = absl::DeadlineExceededError("the write's completion never fired");
    if (absl::Status closed = (*ab)->Close(); !closed.ok() && written.ok()) written = closed;
  });
  std::optional<Notification> got;
  absl::Status progressed;
  int waits = 0, woken = 0;
  while (!finished.load() && absl::Now() < deadline) {
    if (progressed = b->Progress().status(); !progressed.ok()) break;
    got = b->PollNotification();
    if (got.has_value()) break;
    ++waits;
    if (b->WaitForActivity(kWait)) ++woken;
  }
  received.store(true);
  writer.join();
  ASSERT_OK(progressed);
  EXPECT_OK(written);
  ASSERT_TRUE(got.has_value()) << "no notification within 30 s";
  EXPECT_EQ(got->peer_rank, 0);
  EXPECT_EQ(got->value, 9u);
  EXPECT_EQ(remote.data()[4095], std::byte{0x6B});
  EXPECT_GT(waits, 0);
  EXPECT_EQ(woken, waits) << "every wait ends on an event, none at its " << kWait << " limit";
}

// Another thread's InterruptWait() ends a wait in progress over TCP alone,
// where nothing arrives (no peer), long before its timeout; one that comes
// first ends the next wait at once. Each wait is 20 s, so a missed
// interrupt fails rather than passing late.
TEST_F(UcxTransportTest, OverTcpAloneAnotherThreadEndsTheWait) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", "lo"));
  ASSERT_TRUE(a->AnnouncesActivity());
  constexpr absl::Duration kWait = absl::Seconds(20);
  ASSERT_OK(a->Progress().status());
  a->InterruptWait();  // before the wait: the next one ends at once
  absl::Time begin = absl::Now();
  EXPECT_TRUE(a->WaitForActivity(kWait));
  EXPECT_LT(absl::Now() - begin, kWait) << "the interrupt came before the wait";
  // During the wait: the waiting thread says when it is about to wait; the
  // interrupt may land just before the wait begins, which ends it as well.
  std::atomic<bool> waiting{false};
  std::atomic<bool> woken{false};
  absl::Status progressed;
  std::thread waiter([&] {
    absl::Cleanup say = [&] { waiting.store(true); };  // on every way out
    progressed = a->Progress().status();
    if (!progressed.ok()) return;
    std::move(say).Invoke();
    woken.store(a->WaitForActivity(kWait));
  });
  const absl::Time spin_deadline = absl::Now() + kWait;
  while (!waiting.load() && absl::Now() < spin_deadline) std::this_thread::yield();
  begin = absl::Now();
  a->InterruptWait();
  waiter.join();
  ASSERT_OK(progressed);
  EXPECT_TRUE(woken.load());
  EXPECT_LT(absl::Now() - begin, kWait) << "the interrupt did not end the wait";
  // Over shared memory there is no wait to end: the call does nothing.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> shm, Make(0, "shm", "lo"));
  shm->InterruptWait();
  EXPECT_FALSE(shm->WaitForActivity(absl::Milliseconds(1)));
}

TEST_F(UcxTransportTest, TheTransportListSaysWhetherPeersMemoryCanMap) {
  struct Case {
    const char* tls;
    bool maps;
  };
  for (const Case& c : {Case{"", true}, Case{"shm", true}, Case{"tcp,sm", true},
                        Case{"all", true}, Case{"tcp", false}, Case{"^shm", false},
                        Case{"^tcp", true}, Case{"^xpmem", true},
                        Case{"^posix,sysv,xpmem", false}}) {
    SCOPED_TRACE(c.tls);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> t, Make(0, c.tls, "lo"));
    EXPECT_EQ(t->capabilities().maps_peer_memory, c.maps);
  }
}

TEST_F(UcxTransportTest, MalformedNetDevicesAreRejected) {
  for (const char* devices : {",lo", "lo,", "lo,,eth0", "lo eth0"}) {
    EXPECT_THAT(
        Make(0, "tcp", devices),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("net_devices")))
        << devices;
  }
}

TEST_F(UcxTransportTest, AnAbsentDeviceLeavesTcpUnusable) {
  // UCX drops devices it does not have; with TCP alone nothing is left.
  absl::StatusOr<std::unique_ptr<UcxTransport>> made =
      Make(0, "tcp", "no_such_dev0");
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.status(), StatusIs(absl::StatusCode::kUnavailable,
                                      HasSubstr("NET_DEVICES=no_such_dev0")));
}

// The peer never progresses, so the connection's set-up (UCX's wire-up
// request, queued behind the TCP handshake) is still in flight when the
// endpoint closes and the transport goes. UCX 1.13 aborts if the worker is
// destroyed then (ucp_request.c:684 "got REQ message"); the transport must
// not do that, and every callback must still fire.
TEST_F(UcxTransportTest, DestructionWithConnectionSetUpInFlightDoesNotAbort) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "tcp", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "tcp", ""));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, b->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{1, b->address()}));
  int calls = 0;
  absl::Status status;
  ASSERT_OK(ab->PostWrite({&local, 0, 4096}, {&remote.descriptor(), 0, 4096},
                          std::nullopt, [&](absl::Status s) {
                            ++calls;
                            status = s;
                          }));
  ASSERT_OK(ab->Close());
  a.reset();  // `b` never progressed: the set-up cannot finish.
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled));
  ab.reset();
  b.reset();
}

// A region whose key was resolved while its owner held it (Prepare) takes
// a write after the owner let it go: the shared memory stays attached here.
// Unresolved, the first post would unpack the key of a removed segment,
// where UCX 1.13 faults in its error path (a c10d rank posting a credit to
// a peer that had just torn down did).
TEST_F(UcxTransportTest, APreparedRegionTakesAWriteAfterItsOwnerLetItGo) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab, a->Connect({b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  RemoteRegion descriptor;
  {
    ASSERT_OK_AND_ASSIGN(MemoryRegion region, b->Allocate(4096));
    descriptor = region.descriptor();
    ASSERT_OK(ab->Prepare(descriptor));
  }  // b lets the region go
  bool done = false;
  absl::Status status;
  ASSERT_OK(ab->PostWrite({&local, 0, 64}, {&descriptor, 0, 64}, std::nullopt,
                          [&](absl::Status s) {
                            done = true;
                            status = s;
                          }));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done && absl::Now() < deadline) {
    ASSERT_OK(a->Progress().status());
    ASSERT_OK(b->Progress().status());
  }
  ASSERT_TRUE(done) << "the write never completed";
  EXPECT_OK(status);
  RemoteRegion corrupt = descriptor;
  corrupt.packed_key[corrupt.packed_key.size() / 2] ^= 0x5A;
  EXPECT_THAT(ab->Prepare(corrupt), StatusIs(absl::StatusCode::kInvalidArgument));
}

// A mapped write's completion is queued without a reference to its
// endpoint: destroying the endpoint before it fires must keep what the
// queue points at (a use after free under ASan otherwise), and the
// completion still fires exactly once.
TEST_F(UcxTransportTest, CompletionsOfADestroyedEndpointStillFireOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "shm", ""));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, b->Allocate(4096));
  const RemoteRegion& d = remote.descriptor();
  int fired = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                         a->Connect(PeerInfo{b->rank(), b->address()}));
    local.data()[0] = std::byte(round + 1);
    ASSERT_OK(ab->PostWrite({&local, 0, 64}, {&d, 0, 64}, std::nullopt,
                            [&fired](absl::Status s) {
                              EXPECT_OK(s);
                              ++fired;
                            }));
    ASSERT_OK(ab->PostWriteWithFlag({&local, 0, 64}, {&d, 0, 64}, {&d, 64, 8},
                                    round + 1, [&fired](absl::Status) { ++fired; }));
    ab.reset();  // before any Progress(): both completions still queued
    // The mapped copy was done at post time.
    EXPECT_EQ(remote.data()[0], std::byte(round + 1));
    const absl::Time deadline = absl::Now() + kTimeout;
    while (fired < 2 * (round + 1) && absl::Now() < deadline) {
      ASSERT_OK(a->Progress().status());
      ASSERT_OK(b->Progress().status());
    }
    EXPECT_EQ(fired, 2 * (round + 1));
  }
  for (int i = 0; i < 100; ++i) ASSERT_OK(a->Progress().status());
  EXPECT_EQ(fired, 6) << "a completion fired twice";
}

// A binding outliving its endpoint (against Endpoint::BindFlaggedWrite's
// contract): its post is refused and touches neither the endpoint nor the
// peer's memory; the completion of the post made before still fires once.
TEST_F(UcxTransportTest, ABindingOfADestroyedEndpointRefusesToPost) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "shm", ""));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, b->Allocate(64));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{b->rank(), b->address()}));
  std::unique_ptr<BoundFlaggedWrite> write;
  {
    // Descriptors the binding copies: gone before its posts.
    const RemoteRegion d = remote.descriptor();
    ASSERT_OK_AND_ASSIGN(write, ab->BindFlaggedWrite({&local, 0, 8}, {&d, 0, 8}, {&d, 8, 8}));
  }
  int fired = 0;
  ASSERT_OK(write->Post(1, [&fired](absl::Status s) {
    EXPECT_OK(s);
    ++fired;
  }));
  EXPECT_EQ(LoadSharedWord(remote.data() + 8), 1u);
  // Over shared memory the bound write is done at once: inline, with no
  // completion.
  EXPECT_THAT(write->TryPostInline(2), IsOkAndHolds(true));
  EXPECT_EQ(LoadSharedWord(remote.data() + 8), 2u);
  ab.reset();
  EXPECT_THAT(write->Post(3, [&fired](absl::Status) { ++fired; }),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
  EXPECT_THAT(write->TryPostInline(4),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
  const absl::Time deadline = absl::Now() + kTimeout;
  while (fired < 1 && absl::Now() < deadline) ASSERT_OK(a->Progress().status());
  for (int i = 0; i < 100; ++i) ASSERT_OK(a->Progress().status());
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(LoadSharedWord(remote.data() + 8), 2u) << "a refused post's flag landed";
}

// Over shared memory a bound read is a copy out of the peer's mapping:
// inline, with no completion; refused once its endpoint is destroyed.
TEST_F(UcxTransportTest, ABoundReadOverSharedMemoryIsInline) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, Make(0, "shm", ""));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, Make(1, "shm", ""));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, b->Allocate(64));
  std::memset(local.data(), 0xEE, 64);  // guard bytes around the target
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{b->rank(), b->address()}));
  std::unique_ptr<BoundRead> read;
  {
    const RemoteRegion d = remote.descriptor();
    ASSERT_OK_AND_ASSIGN(read, ab->BindRead({&local, 0, 16}, {&d, 8, 16}));
  }
  for (int round = 1; round <= 3; ++round) {
    std::memset(remote.data() + 8, round, 16);
    EXPECT_THAT(read->TryPostInline(), IsOkAndHolds(true));
    EXPECT_EQ(local.data()[0], std::byte(round));
    EXPECT_EQ(local.data()[15], std::byte(round));
    EXPECT_EQ(local.data()[16], std::byte{0xEE}) << "the read wrote past its place";
  }
  int fired = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(const int n, a->Progress());
    fired += n;
  }
  EXPECT_EQ(fired, 0) << "an inline read left a completion to fire";
  ab.reset();
  EXPECT_THAT(read->TryPostInline(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
  EXPECT_THAT(read->Post([](absl::Status) { ADD_FAILURE() << "a refused read fired"; }),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
  for (int i = 0; i < 10; ++i) ASSERT_OK(a->Progress().status());
}

// A flagged write into mapped memory after a write that went through UCX
// (a notified write by active message into memory the peer registered,
// which UCX moves later): the flag must not be seen before that earlier
// write's bytes.
TEST_F(UcxTransportTest, AFlagCoversAnEarlierWriteThatWentThroughUcx) {
  UcxTransportOptions options;
  options.tls = "shm";
  options.flag_notifications = false;  // notified writes: put, flush, message
  options.rank = 0;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> a, UcxTransport::Create(options));
  options.rank = 1;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<UcxTransport> b, UcxTransport::Create(options));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> ab,
                       a->Connect(PeerInfo{b->rank(), b->address()}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, a->Allocate(1 << 20));
  std::vector<std::byte> registered_memory(1 << 20);
  ASSERT_OK_AND_ASSIGN(MemoryRegion registered, b->Register(absl::MakeSpan(registered_memory)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion shared, b->Allocate(64));
  // Bound while every write went through the mapping: inline until the
  // first put, never after it.
  const RemoteRegion& sd = shared.descriptor();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> bound,
                       ab->BindFlaggedWrite({&local, 0, 8}, {&sd, 16, 8}, {&sd, 24, 8}));
  EXPECT_THAT(bound->TryPostInline(100), IsOkAndHolds(true));
  for (int round = 1; round <= 5; ++round) {
    std::memset(local.data(), round, 1 << 20);
    int fired = 0;
    ASSERT_OK(ab->PostWrite({&local, 0, 1 << 20}, {&registered.descriptor(), 0, 1 << 20},
                            round, [&fired](absl::Status s) {
                              EXPECT_OK(s);
                              ++fired;
                            }));
    ASSERT_OK(ab->PostWriteWithFlag({&local, 0, 8}, {&shared.descriptor(), 0, 8},
                                    {&shared.descriptor(), 8, 8}, round,
                                    [&fired](absl::Status s) {
                                      EXPECT_OK(s);
                                      ++fired;
                                    }));
    const absl::Time deadline = absl::Now() + kTimeout;
    bool seen = false;
    while ((!seen || fired < 2) && absl::Now() < deadline) {
      if (!seen && LoadSharedWord(shared.data() + 8) == static_cast<uint64_t>(round)) {
        seen = true;
        // The earlier write's last byte, the moment the flag is there.
        EXPECT_EQ(registered_memory[(1 << 20) - 1], std::byte(round))
            << "round " << round << ": the flag was seen before an earlier write's bytes";
      }
      ASSERT_OK(a->Progress().status());
      ASSERT_OK(b->Progress().status());
      while (b->PollNotification().has_value()) {
      }
    }
    ASSERT_TRUE(seen);
    ASSERT_EQ(fired, 2);
    EXPECT_THAT(bound->TryPostInline(100 + round), IsOkAndHolds(false))
        << "round " << round << ": an inline write after a put";
  }
  EXPECT_EQ(LoadSharedWord(shared.data() + 24), 100u) << "a write not taken inline landed";
}

// UCX's warnings while it is alive: "invalid configuration: ..." names a
// setting no transport took (ucp_worker.c, at the worker's end).
class UcxWarnings {
 public:
  UcxWarnings() { ucs_log_push_handler(&Record); }
  ~UcxWarnings() { ucs_log_pop_handler(); }
  std::vector<std::string> Take() {
    std::vector<std::string> taken;
    taken.swap(*messages());
    return taken;
  }

 private:
  static std::vector<std::string>* messages() {
    static auto* list = new std::vector<std::string>();
    return list;
  }
  static ucs_log_func_rc_t Record(const char*, unsigned, const char*, ucs_log_level_t level,
                                  const ucs_log_component_config_t*, const char* format,
                                  va_list ap) {
    if (level <= UCS_LOG_LEVEL_WARN) {
      char text[512];
      va_list copy;
      va_copy(copy, ap);
      std::vsnprintf(text, sizeof(text), format, copy);
      va_end(copy);
      messages()->emplace_back(text);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
  }
};

// TCP sends a large put in pieces of 64 KiB, not UCX's 8 (tcp_tx_seg_kb):
// set where TCP may run (UCX takes it: no warning of a setting nobody
// took), and the description says so; never where TCP cannot run (UCX
// would warn); UCX_TCP_TX_SEG_SIZE or UCX_TCP_RX_SEG_SIZE in the
// environment wins; 0 leaves UCX's; a bad size is refused.
TEST_F(UcxTransportTest, TcpSendsLargePutsInPiecesOfTheGivenSize) {
  TransportRegistry registry;
  ASSERT_OK(RegisterUcxTransport(registry));
  UcxWarnings warnings;
  TransportConfig config;
  {
    config.params = {{"tls", "tcp"}, {"net_devices", "lo"}};
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> a, registry.Create("ucx", config));
    EXPECT_THAT(a->capabilities().description, HasSubstr("TCP_TX_SEG_SIZE=64K"));
    config.rank = 1;
    config.params["tcp_tx_seg_kb"] = "32";
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> b, registry.Create("ucx", config));
    EXPECT_THAT(b->capabilities().description, HasSubstr("TCP_TX_SEG_SIZE=32K"));
    ASSERT_OK(RoundTrip(*a, *b, nullptr));
  }
  EXPECT_THAT(warnings.Take(), ::testing::Not(::testing::Contains(
                                   HasSubstr("invalid configuration"))));
  config.params["tcp_tx_seg_kb"] = "0";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> ucx_own, registry.Create("ucx", config));
  EXPECT_THAT(ucx_own->capabilities().description,
              ::testing::Not(HasSubstr("TCP_TX_SEG_SIZE")));
  {
    config.params = {{"tls", "shm"}};
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> shm, registry.Create("ucx", config));
    EXPECT_THAT(shm->capabilities().description,
                ::testing::Not(HasSubstr("TCP_TX_SEG_SIZE")));
  }
  EXPECT_THAT(warnings.Take(), ::testing::Not(::testing::Contains(
                                   HasSubstr("invalid configuration"))));
  for (const std::string bad : {"-1", "x", "65"}) {
    config.params = {{"tls", "tcp"}, {"net_devices", "lo"}, {"tcp_tx_seg_kb", bad}};
    EXPECT_THAT(registry.Create("ucx", config),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tcp_tx_seg_kb")))
        << bad;
  }
  config.params = {{"tls", "tcp"}, {"net_devices", "lo"}};
  for (const char* variable : {"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"}) {
    setenv(variable, "16K", 1);
    absl::StatusOr<std::unique_ptr<Transport>> from_env = registry.Create("ucx", config);
    unsetenv(variable);
    ASSERT_OK(from_env.status()) << variable;
    EXPECT_THAT((*from_env)->capabilities().description,
                ::testing::Not(HasSubstr("TCP_TX_SEG_SIZE")))
        << variable;
  }
}

TEST(OnlyTcpTest, ReadsTheTransports) {
  EXPECT_TRUE(OnlyTcp("tcp"));
  EXPECT_TRUE(OnlyTcp("\\tcp"));
  EXPECT_TRUE(OnlyTcp("tcp,tcp:aux"));
  EXPECT_FALSE(OnlyTcp(""));  // UCX's choice: all
  EXPECT_FALSE(OnlyTcp("all"));
  EXPECT_FALSE(OnlyTcp("^shm"));
  EXPECT_FALSE(OnlyTcp("shm,tcp"));
  EXPECT_FALSE(OnlyTcp("rc,tcp:aux"));
  EXPECT_FALSE(OnlyTcp("^tcp"));
}

TEST(MayUseTcpTest, ReadsTheTransportsAndTheDevices) {
  EXPECT_TRUE(MayUseTcp("", ""));
  EXPECT_TRUE(MayUseTcp("tcp", "lo"));
  EXPECT_TRUE(MayUseTcp("shm,tcp", "eth0,mlx5_0:1"));
  EXPECT_TRUE(MayUseTcp("all", "all"));
  EXPECT_TRUE(MayUseTcp("^shm", ""));
  EXPECT_FALSE(MayUseTcp("^tcp", ""));
  EXPECT_FALSE(MayUseTcp("shm", ""));
  EXPECT_FALSE(MayUseTcp("rc_verbs,ud_verbs", "lo"));
  EXPECT_FALSE(MayUseTcp("tcp", "mlx5_0:1"));
  // Spellings UCX 1.13 takes: a name as such, wireup only, aliases.
  EXPECT_TRUE(MayUseTcp("\\tcp", ""));
  EXPECT_TRUE(MayUseTcp("rc,tcp:aux", ""));
  EXPECT_TRUE(MayUseTcp("^sm,ib", ""));
  EXPECT_FALSE(MayUseTcp("sm,ib", ""));
  EXPECT_FALSE(MayUseTcp("^sm,tcp", ""));
  const TlsList list = ParseTls("^\\posix,tcp:aux");
  EXPECT_TRUE(list.all_but);
  EXPECT_THAT(list.names, ::testing::ElementsAre("posix", "tcp"));
}

TEST_F(UcxTransportTest, RegistryTakesNetDevices) {
  TransportRegistry registry;
  ASSERT_OK(RegisterUcxTransport(registry));
  TransportConfig config;
  config.params = {{"tls", "tcp"}, {"net_devices", "lo"}};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> transport,
                       registry.Create("ucx", config));
  EXPECT_THAT(transport->capabilities().description,
              HasSubstr("NET_DEVICES=lo"));
  config.params = {{"net_devices", "lo,,eth0"}};
  EXPECT_THAT(registry.Create("ucx", config),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.params = {{"net_device", "lo"}};
  EXPECT_THAT(
      registry.Create("ucx", config),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("net_devices")));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
