// File: ibverbs_unit_test.cc
// The parts of the ibverbs backend that need no RDMA device: the handshake
// (over loopback TCP: the job token, claimed ranks, concurrent clients,
// abandoned handshakes, caps, the bind address), peer-death detection
// through its connection, remote key packing, work-completion error mapping,
// and a clear kUnavailable when no device exists.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/ibverbs_status.h"
#include "rdma/ibverbs/ibverbs_transport.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

QueuePairInfo SampleInfo(int rank) {
  QueuePairInfo info;
  info.rank = rank;
  info.qpn = 0x1234 + rank;
  info.psn = 0xabcdef;
  info.lid = 7;
  for (int i = 0; i < 16; ++i) info.gid.raw[i] = i * 3;
  info.mtu = IBV_MTU_1024;
  info.marker_address = 0x7f0000001000;
  info.marker_rkey = 0x55aa;
  info.notify_address = 0x7f0000002000;
  info.notify_rkey = 0x77bb;
  info.notify_slots = 256;
  return info;
}

void ExpectSame(const QueuePairInfo& a, const QueuePairInfo& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.qpn, b.qpn);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.lid, b.lid);
  EXPECT_EQ(0, memcmp(a.gid.raw, b.gid.raw, 16));
  EXPECT_EQ(a.mtu, b.mtu);
  EXPECT_EQ(a.marker_address, b.marker_address);
  EXPECT_EQ(a.marker_rkey, b.marker_rkey);
  EXPECT_EQ(a.notify_address, b.notify_address);
  EXPECT_EQ(a.notify_rkey, b.notify_rkey);
  EXPECT_EQ(a.notify_slots, b.notify_slots);
}

TEST(BootstrapTest, QueuePairInfoRoundTrips) {
  QueuePairInfo info = SampleInfo(3);
  ASSERT_OK_AND_ASSIGN(QueuePairInfo decoded,
                       DecodeQueuePairInfo(EncodeQueuePairInfo(info)));
  ExpectSame(info, decoded);
  std::string bytes = EncodeQueuePairInfo(info);
  EXPECT_THAT(DecodeQueuePairInfo(bytes.substr(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bytes[0] ^= 1;
  EXPECT_THAT(DecodeQueuePairInfo(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("another version")));
}

constexpr char kToken[] = "job-secret";
constexpr uint64_t kInstance = 0x1157ab1e;

// A listener for rank 1 of 4 on loopback, token kToken.
BootstrapListenerOptions TestOptions() {
  BootstrapListenerOptions options;
  options.bind_address = "127.0.0.1";
  options.job_token = kToken;
  options.job_token_source = "the test";
  options.local_rank = 1;
  options.instance = kInstance;
  options.world_size = 4;
  return options;
}

// The listener of TestOptions().
HandshakeTarget Target() { return HandshakeTarget{1, kInstance}; }

// A handshake claiming `rank` with the listener on 127.0.0.1:`port`.
absl::StatusOr<Handshake> Exchange(int port, int rank, absl::Duration timeout,
                                   const std::string& token = kToken,
                                   const HandshakeTarget& target = Target()) {
  return ExchangeQueuePairInfo("127.0.0.1", port, SampleInfo(rank), target,
                               token, timeout);
}

// Counts events and lets a test wait for them, with a deadline.
class Counter {
 public:
  void Increment() {
    absl::MutexLock lock(&mutex_);
    ++count_;
  }
  int count() const {
    absl::MutexLock lock(&mutex_);
    return count_;
  }
  // Whether the count reached `n` within `timeout`.
  bool WaitFor(int n, absl::Duration timeout) const {
    absl::MutexLock lock(&mutex_);
    auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return count_ >= n;
    };
    return mutex_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  mutable absl::Mutex mutex_;
  int count_ ABSL_GUARDED_BY(mutex_) = 0;
};

// Stands in for an accepted queue pair: counts its release.
class CountedPeer final : public AcceptedPeer {
 public:
  explicit CountedPeer(Counter* released) : released_(released) {}
  ~CountedPeer() override { released_->Increment(); }

 private:
  Counter* released_;
};

// A handler answering as rank 1 that counts calls and releases.
BootstrapListener::Handler CountingHandler(Counter* calls, Counter* released) {
  return [calls, released](const QueuePairInfo&) -> absl::StatusOr<Accepted> {
    calls->Increment();
    Accepted accepted;
    accepted.info = SampleInfo(1);
    accepted.peer = std::make_unique<CountedPeer>(released);
    return accepted;
  };
}

// A TCP connection to 127.0.0.1:port that says nothing.
UniqueFd ConnectRaw(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  return fd;
}

// Waits (bounded) until `fd`'s peer closed it, discarding what it sent.
bool WaitClosed(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{fd, POLLIN, 0};
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return false;
    char buffer[256];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

// Sets (or with nullptr unsets) an environment variable for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Finding 9 of issue 41: the request's MAC covers a fresh nonce and the
// target listener (rank and instance), and the token itself never travels;
// the answer's MAC covers the request's nonce.
TEST(BootstrapTest, HandshakeRequestsAreMacdOverTheirNonceAndTarget) {
  ASSERT_OK_AND_ASSIGN(const std::string bytes,
                       EncodeHandshakeRequest(SampleInfo(2), 0x5eed, Target(),
                                              kToken));
  EXPECT_EQ(bytes.find(kToken), std::string::npos) << "the token travels";
  ASSERT_OK_AND_ASSIGN(HandshakeRequest decoded,
                       DecodeHandshakeRequest(bytes, kToken, Target()));
  ExpectSame(decoded.info, SampleInfo(2));
  EXPECT_EQ(decoded.nonce, 0x5eedu);
  // Another job, another target rank, another process at the address.
  EXPECT_THAT(DecodeHandshakeRequest(bytes, "job-other", Target()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("job token does not verify")));
  EXPECT_THAT(DecodeHandshakeRequest(bytes, kToken, HandshakeTarget{3, kInstance}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(DecodeHandshakeRequest(bytes, kToken, HandshakeTarget{1, kInstance + 1}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // The nonce is covered: a replayer cannot make a captured request new.
  std::string renonced = bytes;
  renonced[renonced.size() - kHandshakeMacBytes - 1] ^= 1;
  EXPECT_THAT(DecodeHandshakeRequest(renonced, kToken, Target()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Truncated, extended, or the previous version (info and a clear token).
  EXPECT_THAT(DecodeHandshakeRequest(bytes.substr(0, bytes.size() - 1), kToken,
                                     Target()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DecodeHandshakeRequest(bytes + "x", kToken, Target()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DecodeHandshakeRequest(EncodeQueuePairInfo(SampleInfo(2)),
                                     kToken, Target()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // An answer verifies only for the request it answers.
  ASSERT_OK_AND_ASSIGN(const std::string answer,
                       EncodeHandshakeAnswer(SampleInfo(1), 0x5eed, kToken));
  ASSERT_OK_AND_ASSIGN(QueuePairInfo remote,
                       DecodeHandshakeAnswer(answer, 0x5eed, kToken));
  ExpectSame(remote, SampleInfo(1));
  EXPECT_THAT(DecodeHandshakeAnswer(answer, 0x5eee, kToken),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(DecodeHandshakeAnswer(answer, 0x5eed, "job-other"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(BootstrapTest, HandshakeExchangesInfoAndKeepsTheConnection) {
  std::atomic<int> calls{0};
  ASSERT_OK_AND_ASSIGN(
      auto listener,
      BootstrapListener::Start(
          TestOptions(), [&](const QueuePairInfo& r) -> absl::StatusOr<Accepted> {
            ++calls;
            EXPECT_EQ(r.rank, 0);
            return Accepted{SampleInfo(1), nullptr};
          }));
  ASSERT_OK_AND_ASSIGN(Handshake handshake,
                       Exchange(listener->port(), 0, absl::Seconds(5)));
  ExpectSame(handshake.remote, SampleInfo(1));
  EXPECT_EQ(calls.load(), 1);
  ASSERT_OK(ConfirmHandshake(handshake, absl::Seconds(5)));
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.established == 1; },
      absl::Seconds(10)));
  // The listener keeps its end open while it lives...
  EXPECT_FALSE(PeerClosed(handshake.connection.get()));
  // ...and the connection reports the peer gone once it is destroyed.
  listener.reset();
  EXPECT_TRUE(PeerClosed(handshake.connection.get()));
}

TEST(BootstrapTest, RefusedHandshakeCarriesThePeersReason) {
  ASSERT_OK_AND_ASSIGN(
      auto listener,
      BootstrapListener::Start(TestOptions(), [](const QueuePairInfo&) {
        return absl::StatusOr<Accepted>(
            absl::ResourceExhaustedError("no more QPs"));
      }));
  EXPECT_THAT(Exchange(listener->port(), 0, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("refused the connection: no more QPs")));
}

TEST(BootstrapTest, UnreachablePeerIsUnavailable) {
  // A port nobody listens on: bound (so no other process may take it
  // meanwhile) but never listening, which refuses a connection.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  EXPECT_THAT(Exchange(ntohs(addr.sin_port), 0, absl::Seconds(2)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("handshake with 127.0.0.1")));
  close(fd);
}

TEST(BootstrapTest, WrongOrMissingTokenIsRefusedAndTheListenerKeepsServing) {
  Counter calls, released;
  ASSERT_OK_AND_ASSIGN(
      auto listener, BootstrapListener::Start(
                         TestOptions(), CountingHandler(&calls, &released)));
  EXPECT_THAT(Exchange(listener->port(), 0, absl::Seconds(5), "job-secreT"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("job token does not verify")));
  EXPECT_THAT(Exchange(listener->port(), 0, absl::Seconds(5), ""),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("job token does not verify")));
  // A client of another protocol (here: the previous version's request,
  // without a token).
  {
    UniqueFd raw = ConnectRaw(listener->port());
    std::string body = EncodeQueuePairInfo(SampleInfo(0));
    uint32_t size = body.size();
    std::string frame(reinterpret_cast<const char*>(&size), 4);
    frame += body;
    ASSERT_EQ(send(raw.get(), frame.data(), frame.size(), 0),
              static_cast<ssize_t>(frame.size()));
    EXPECT_TRUE(WaitClosed(raw.get(), absl::Seconds(10)));
  }
  // No queue pair was created for any of them.
  EXPECT_EQ(calls.count(), 0);
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.refused == 3; },
      absl::Seconds(10)));
  // The right token still gets through.
  ASSERT_OK_AND_ASSIGN(Handshake handshake,
                       Exchange(listener->port(), 0, absl::Seconds(5)));
  ExpectSame(handshake.remote, SampleInfo(1));
  EXPECT_EQ(calls.count(), 1);
}

TEST(BootstrapTest, ClaimedRanksOutsideTheJobOrOursAreRefused) {
  Counter calls, released;
  ASSERT_OK_AND_ASSIGN(
      auto listener, BootstrapListener::Start(
                         TestOptions(), CountingHandler(&calls, &released)));
  const int port = listener->port();
  EXPECT_THAT(Exchange(port, 4, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rank 4 is outside the job's ranks 0..3")));
  EXPECT_THAT(Exchange(port, -1, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("outside the job's ranks")));
  EXPECT_THAT(Exchange(port, 1, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("this listener's own rank")));
  EXPECT_EQ(calls.count(), 0);
  EXPECT_OK(Exchange(port, 3, absl::Seconds(5)));
  EXPECT_EQ(calls.count(), 1);

  // World size unknown: any rank but ours, not negative.
  BootstrapListenerOptions options = TestOptions();
  options.world_size = 0;
  ASSERT_OK_AND_ASSIGN(listener, BootstrapListener::Start(
                                     options, CountingHandler(&calls, &released)));
  EXPECT_OK(Exchange(listener->port(), 100, absl::Seconds(5)));
  EXPECT_THAT(Exchange(listener->port(), -5, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("negative")));
  EXPECT_THAT(Exchange(listener->port(), 1, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("own rank")));
}

// Sends one framed `body` on `fd` and returns the framed answer's body
// (empty if none came within 10 s).
std::string SendFramed(int fd, const std::string& body) {
  const uint32_t size = body.size();
  std::string frame(reinterpret_cast<const char*>(&size), 4);
  frame += body;
  EXPECT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  std::string in;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (in.size() >= 4) {
      uint32_t want = 0;
      std::memcpy(&want, in.data(), 4);
      if (in.size() >= 4 + want) return in.substr(4, want);
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[512];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) break;
    in.append(buffer, n);
  }
  return "";
}

// Finding 9 of issue 41: a captured request, sent again, is refused, even
// after the connection it made is gone; so is one aimed at another rank.
TEST(BootstrapTest, AReplayedRequestIsRefused) {
  Counter calls, released;
  ASSERT_OK_AND_ASSIGN(
      auto listener, BootstrapListener::Start(
                         TestOptions(), CountingHandler(&calls, &released)));
  ASSERT_OK_AND_ASSIGN(const std::string captured,
                       EncodeHandshakeRequest(SampleInfo(0), 0xc0ffee,
                                              Target(), kToken));
  {
    UniqueFd first = ConnectRaw(listener->port());
    const std::string reply = SendFramed(first.get(), captured);
    ASSERT_FALSE(reply.empty());
    EXPECT_EQ(reply[0], 'K');
    ASSERT_OK(DecodeHandshakeAnswer(reply.substr(1), 0xc0ffee, kToken));
  }  // Closed unconfirmed: the listener frees its queue pair.
  ASSERT_TRUE(released.WaitFor(1, absl::Seconds(30)));
  UniqueFd replay = ConnectRaw(listener->port());
  const std::string reply = SendFramed(replay.get(), captured);
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(reply[0], 'E');
  EXPECT_THAT(reply, HasSubstr("replayed"));
  // A request MAC'd for rank 2's listener (same token) does not verify here.
  ASSERT_OK_AND_ASSIGN(const std::string elsewhere,
                       EncodeHandshakeRequest(SampleInfo(0), 0xbeef,
                                              HandshakeTarget{2, kInstance},
                                              kToken));
  UniqueFd misdirected = ConnectRaw(listener->port());
  EXPECT_THAT(SendFramed(misdirected.get(), elsewhere),
              HasSubstr("job token does not verify"));
  EXPECT_EQ(calls.count(), 1);
}

// Finding 9 of issue 41: while rank 0 holds connections from one process,
// another process claiming rank 0 is refused naming the rank; the holder
// may open up to max_connections_per_rank; once its connections close, a
// restarted process connects.
TEST(BootstrapTest, TwoProcessesCannotHoldOneRank) {
  Counter calls, released;
  BootstrapListenerOptions options = TestOptions();
  options.max_connections_per_rank = 2;
  ASSERT_OK_AND_ASSIGN(auto listener,
                       BootstrapListener::Start(
                           options, CountingHandler(&calls, &released)));
  const int port = listener->port();
  QueuePairInfo first_process = SampleInfo(0);
  QueuePairInfo second_process = SampleInfo(0);
  second_process.marker_address += 0x10000;  // Its own marker region.
  auto exchange = [&](const QueuePairInfo& info) {
    return ExchangeQueuePairInfo("127.0.0.1", port, info, Target(), kToken,
                                 absl::Seconds(5));
  };
  ASSERT_OK_AND_ASSIGN(Handshake a, exchange(first_process));
  ASSERT_OK(ConfirmHandshake(a, absl::Seconds(5)));
  EXPECT_THAT(exchange(second_process),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("two processes claim rank 0")));
  ASSERT_OK_AND_ASSIGN(Handshake b, exchange(first_process));
  ASSERT_OK(ConfirmHandshake(b, absl::Seconds(5)));
  EXPECT_THAT(exchange(first_process),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rank 0 already holds its 2 connections")));
  EXPECT_EQ(calls.count(), 2);
  // The first process dies: its connections close, and the restarted one
  // takes rank 0 (retrying while the listener notices the closes).
  a.connection = UniqueFd();
  b.connection = UniqueFd();
  ASSERT_TRUE(released.WaitFor(2, absl::Seconds(30)));
  absl::StatusOr<Handshake> restarted = exchange(second_process);
  for (int i = 0; i < 100 && !restarted.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    restarted = exchange(second_process);
  }
  ASSERT_OK(restarted.status());
  EXPECT_EQ(calls.count(), 3);
}

TEST(BootstrapTest, AnIdleClientDoesNotStallOthers) {
  Counter calls, released;
  ASSERT_OK_AND_ASSIGN(
      auto listener, BootstrapListener::Start(
                         TestOptions(), CountingHandler(&calls, &released)));
  // One client connects and says nothing; another sends half a length.
  UniqueFd idle = ConnectRaw(listener->port());
  UniqueFd partial = ConnectRaw(listener->port());
  ASSERT_EQ(send(partial.get(), "\x3b\x00", 2, 0), 2);
  ASSERT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.handshakes == 2; },
      absl::Seconds(10)));
  // Both are accepted and waiting; a third completes the whole handshake
  // meanwhile (the listener's deadline for them is 10 s, this client's 5 s).
  ASSERT_OK_AND_ASSIGN(Handshake handshake,
                       Exchange(listener->port(), 0, absl::Seconds(5)));
  ASSERT_OK(ConfirmHandshake(handshake, absl::Seconds(5)));
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.established == 1; },
      absl::Seconds(10)));
  // ...while the first two are still connected and pending.
  EXPECT_FALSE(PeerClosed(idle.get()));
  EXPECT_FALSE(PeerClosed(partial.get()));
  EXPECT_EQ(listener->stats().handshakes, 2);
  EXPECT_EQ(calls.count(), 1);
}

TEST(BootstrapTest, AbandonedHandshakesFreeTheirQueuePair) {
  Counter calls, released;
  BootstrapListenerOptions options = TestOptions();
  // Long enough for the healthy peers below to confirm on a loaded machine
  // (under AddressSanitizer too): the deadline runs from accept() on.
  options.handshake_timeout = absl::Seconds(2);
  options.max_pending_queue_pairs = 1;
  ASSERT_OK_AND_ASSIGN(auto listener,
                       BootstrapListener::Start(
                           options, CountingHandler(&calls, &released)));
  // Gets its answer (a queue pair is created for it), never confirms.
  ASSERT_OK_AND_ASSIGN(Handshake abandoned,
                       Exchange(listener->port(), 0, absl::Seconds(5)));
  EXPECT_EQ(calls.count(), 1);
  // At its deadline the listener frees the queue pair and closes.
  ASSERT_TRUE(released.WaitFor(1, absl::Seconds(30)));
  EXPECT_TRUE(WaitClosed(abandoned.connection.get(), absl::Seconds(10)));
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) {
        return s.abandoned == 1 && s.pending_queue_pairs == 0 &&
               s.peers_released == 1;
      },
      absl::Seconds(10)));
  // A peer that closes before confirming frees its queue pair too.
  {
    ASSERT_OK_AND_ASSIGN(Handshake gone,
                         Exchange(listener->port(), 2, absl::Seconds(5)));
  }
  ASSERT_TRUE(released.WaitFor(2, absl::Seconds(30)));
  // The cap (1) is free again: the next peer connects and stays.
  ASSERT_OK_AND_ASSIGN(Handshake kept,
                       Exchange(listener->port(), 3, absl::Seconds(5)));
  ASSERT_OK(ConfirmHandshake(kept, absl::Seconds(5)));
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.established == 1; },
      absl::Seconds(10)));
  EXPECT_EQ(released.count(), 2);
  // Once confirmed there is no deadline; closing the connection (the
  // endpoint destroyed, the process gone) frees the queue pair.
  kept.connection = UniqueFd();
  ASSERT_TRUE(released.WaitFor(3, absl::Seconds(30)));
  EXPECT_TRUE(listener->WaitForStats(
      [](const BootstrapListenerStats& s) { return s.established == 0; },
      absl::Seconds(10)));
}

TEST(BootstrapTest, PendingQueuePairsAreCappedAndBusyClientsRetry) {
  Counter calls, released;
  BootstrapListenerOptions options = TestOptions();
  options.max_pending_queue_pairs = 1;
  ASSERT_OK_AND_ASSIGN(auto listener,
                       BootstrapListener::Start(
                           options, CountingHandler(&calls, &released)));
  ASSERT_OK_AND_ASSIGN(Handshake first,
                       Exchange(listener->port(), 0, absl::Seconds(5)));
  // The only slot is taken until `first` confirms (its deadline is 10 s):
  // this client retries, then gives up saying why.
  EXPECT_THAT(Exchange(listener->port(), 2, absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("stayed busy")));
  EXPECT_EQ(calls.count(), 1);
  EXPECT_GE(listener->stats().busy, 1);
  ASSERT_OK(ConfirmHandshake(first, absl::Seconds(5)));
  // Now it gets through (retrying while the confirmation is processed).
  ASSERT_OK(Exchange(listener->port(), 2, absl::Seconds(10)));
  EXPECT_EQ(calls.count(), 2);
}

TEST(BootstrapTest, ListenerBindsTheInterfaceThatReachesMasterAddr) {
  ScopedEnv no_bind("RDMAFLOW_BIND_ADDR", nullptr);
  ScopedEnv master("MASTER_ADDR", "127.0.0.1");
  ASSERT_OK_AND_ASSIGN(BindChoice choice,
                       ChooseBindAddress("", "192.0.2.1"));
  EXPECT_EQ(choice.address, "127.0.0.1");
  EXPECT_THAT(choice.why, HasSubstr("MASTER_ADDR=127.0.0.1"));
  BootstrapListenerOptions options = TestOptions();
  options.bind_address = choice.address;
  ASSERT_OK_AND_ASSIGN(
      auto listener,
      BootstrapListener::Start(options, [](const QueuePairInfo&) {
        return absl::StatusOr<Accepted>(Accepted{SampleInfo(1), nullptr});
      }));
  EXPECT_EQ(listener->bound_address(), "127.0.0.1");
  EXPECT_OK(Exchange(listener->port(), 0, absl::Seconds(5)));
}

TEST(BootstrapTest, BindAddressPrecedence) {
  ScopedEnv master("MASTER_ADDR", "127.0.0.1");
  {
    // An interface named by RDMAFLOW_BIND_ADDR beats MASTER_ADDR.
    ScopedEnv bind("RDMAFLOW_BIND_ADDR", "lo");
    ASSERT_OK_AND_ASSIGN(BindChoice choice, ChooseBindAddress("", "192.0.2.1"));
    EXPECT_EQ(choice.address, "127.0.0.1");
    EXPECT_THAT(choice.why, HasSubstr("RDMAFLOW_BIND_ADDR=lo"));
    // The configured address beats both.
    ASSERT_OK_AND_ASSIGN(choice, ChooseBindAddress("127.0.0.2", "192.0.2.1"));
    EXPECT_EQ(choice.address, "127.0.0.2");
  }
  {
    ScopedEnv bind("RDMAFLOW_BIND_ADDR", "no-such-interface.invalid");
    EXPECT_THAT(ChooseBindAddress("", "192.0.2.1"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("RDMAFLOW_BIND_ADDR")));
  }
  {
    // Neither: the fallback.
    ScopedEnv bind("RDMAFLOW_BIND_ADDR", nullptr);
    ScopedEnv no_master("MASTER_ADDR", nullptr);
    ASSERT_OK_AND_ASSIGN(BindChoice choice, ChooseBindAddress("", "127.0.0.3"));
    EXPECT_EQ(choice.address, "127.0.0.3");
  }
  // A bind address that is not this host's is refused with what to do.
  BootstrapListenerOptions options = TestOptions();
  options.bind_address = "192.0.2.1";  // TEST-NET-1, never local.
  EXPECT_THAT(BootstrapListener::Start(options, nullptr),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("RDMAFLOW_BIND_ADDR")));
}

// Finding 9 of issue 41: the request (56 bytes, all an RC connect request
// carries) has a nonce, and its MAC covers it and the target listener; the
// answer's MAC covers the request's nonce.
TEST(RdmaCmTest, PrivateDataIsMacdOverItsNonceAndTargetAndForgeriesAreRefused) {
  CmPeerInfo info;
  info.rank = 5;
  info.marker_address = 0x7f0000001000;
  info.marker_rkey = 0x1234;
  info.notify_address = 0x7f0000002000;
  info.notify_rkey = 0x5678;
  const HandshakeTarget target{2, kInstance};
  ASSERT_OK_AND_ASSIGN(const std::string request,
                       EncodeCmRequest(info, 0xfeed, target, "job-a"));
  EXPECT_EQ(request.size(), 56u) << "an RC connect request carries 56 bytes";
  ASSERT_OK_AND_ASSIGN(CmRequest decoded,
                       DecodeCmRequest(request, "job-a", target));
  EXPECT_EQ(decoded.info.rank, 5);
  EXPECT_EQ(decoded.nonce, 0xfeedu);
  EXPECT_EQ(decoded.info.marker_address, info.marker_address);
  EXPECT_EQ(decoded.info.marker_rkey, info.marker_rkey);
  EXPECT_EQ(decoded.info.notify_address, info.notify_address);
  EXPECT_EQ(decoded.info.notify_rkey, info.notify_rkey);
  // The connection manager pads private data with zeros.
  EXPECT_OK(DecodeCmRequest(request + std::string(8, '\0'), "job-a", target));
  EXPECT_THAT(DecodeCmRequest(request, "job-b", target),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("job token does not verify")));
  // Aimed at another rank, or at an earlier process at the same address.
  EXPECT_THAT(DecodeCmRequest(request, "job-a", HandshakeTarget{3, kInstance}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(DecodeCmRequest(request, "job-a", HandshakeTarget{2, 7}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  std::string forged = request;
  forged[4] ^= 1;  // Another claimed rank, the MAC left as it was.
  EXPECT_THAT(DecodeCmRequest(forged, "job-a", target),
              StatusIs(absl::StatusCode::kPermissionDenied));
  forged = request;
  forged[32] ^= 1;  // Another nonce (bytes 32..39), the MAC left as it was.
  EXPECT_THAT(DecodeCmRequest(forged, "job-a", target),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(DecodeCmRequest(request.substr(0, 20), "job-a", target),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DecodeCmAnswer(request, 0xfeed, "job-a"),
              StatusIs(absl::StatusCode::kInvalidArgument))
      << "a request is not an answer";
  info.notify_slots = 256;
  ASSERT_OK_AND_ASSIGN(const std::string answer_bytes,
                       EncodeCmAnswer(info, 0xfeed, "job-a"));
  ASSERT_OK_AND_ASSIGN(CmPeerInfo answer,
                       DecodeCmAnswer(answer_bytes, 0xfeed, "job-a"));
  EXPECT_EQ(answer.notify_slots, 256u);
  // An answer captured for one request does not verify for another.
  EXPECT_THAT(DecodeCmAnswer(answer_bytes, 0xfeee, "job-a"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

// The rules both listeners apply (the rdmacm listener needs a device, so
// this is where its admission is proven): replayed nonces, a rank claimed
// by two processes, the caps, and slots freed on teardown.
TEST(AdmissionTest, ReplaysAreRefusedWithinABoundedMemory) {
  AdmissionOptions options;
  options.local_rank = 1;
  options.world_size = 4;
  options.max_remembered_nonces = 3;
  ASSERT_OK_AND_ASSIGN(PeerAdmission admission, PeerAdmission::Create(options));
  ASSERT_OK(admission.Admit(Claim{0, 10, "a"}));
  admission.Release(0, false);
  // Refused even after its connection is gone, and whatever it claims.
  EXPECT_THAT(admission.Admit(Claim{0, 10, "a"}),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("replayed")));
  EXPECT_THAT(admission.Admit(Claim{2, 10, "b"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A refused request's nonce is remembered too (else replayable later).
  EXPECT_THAT(admission.Admit(Claim{1, 11, "a"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("own rank")));
  EXPECT_THAT(admission.Admit(Claim{0, 11, "a"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // The memory is bounded: the oldest nonce is forgotten first.
  ASSERT_OK(admission.Admit(Claim{0, 12, "a"}));
  ASSERT_OK(admission.Admit(Claim{0, 13, "a"}));
  EXPECT_EQ(admission.remembered_nonces(), 3u);
  EXPECT_THAT(admission.Admit(Claim{0, 13, "a"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_OK(admission.Admit(Claim{0, 10, "a"})) << "forgotten: the bound";
}

TEST(AdmissionTest, ARankIsBoundToOneClaimerWhileItHoldsConnections) {
  AdmissionOptions options;
  options.local_rank = 1;
  options.world_size = 4;
  options.max_connections_per_rank = 2;  // E.g. 1 endpoint x 2 queue pairs.
  ASSERT_OK_AND_ASSIGN(PeerAdmission admission, PeerAdmission::Create(options));
  uint64_t nonce = 0;
  ASSERT_OK(admission.Admit(Claim{0, ++nonce, "10.0.0.1 (marker A)"}));
  admission.Established(0);
  // Another process claiming rank 0 meanwhile is refused, naming the rank.
  EXPECT_THAT(admission.Admit(Claim{0, ++nonce, "10.0.0.9 (marker B)"}),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("two processes claim rank 0")));
  // The holder's own second queue pair is fine; a third is over the cap.
  ASSERT_OK(admission.Admit(Claim{0, ++nonce, "10.0.0.1 (marker A)"}));
  EXPECT_THAT(admission.Admit(Claim{0, ++nonce, "10.0.0.1 (marker A)"}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("rank 0 already holds its 2 connections")));
  EXPECT_EQ(admission.connections_of(0), 2);
  // Other ranks are independent.
  ASSERT_OK(admission.Admit(Claim{2, ++nonce, "10.0.0.2 (marker C)"}));
  // Once rank 0's connections are torn down, a restarted process claims it.
  admission.Release(0, true);
  admission.Release(0, false);
  EXPECT_EQ(admission.connections_of(0), 0);
  ASSERT_OK(admission.Admit(Claim{0, ++nonce, "10.0.0.9 (marker B)"}));
  EXPECT_EQ(admission.connections(), 2);
}

TEST(AdmissionTest, PendingAndTotalConnectionsAreCapped) {
  AdmissionOptions options;
  options.local_rank = 0;
  options.world_size = 0;
  options.max_pending = 1;
  options.max_connections = 2;
  ASSERT_OK_AND_ASSIGN(PeerAdmission admission, PeerAdmission::Create(options));
  ASSERT_OK(admission.Admit(Claim{1, 1, "a"}));
  EXPECT_THAT(admission.Admit(Claim{2, 2, "b"}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("retry")));
  admission.Established(1);
  ASSERT_OK(admission.Admit(Claim{2, 3, "b"}));
  admission.Established(2);
  EXPECT_THAT(admission.Admit(Claim{3, 4, "c"}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("at most 2")));
  admission.Release(1, true);
  EXPECT_OK(admission.Admit(Claim{3, 5, "c"}));
  options.max_pending = 0;
  EXPECT_THAT(PeerAdmission::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KeyTest, PackedKeysRoundTripAndForeignOnesAreRejected) {
  ASSERT_OK_AND_ASSIGN(uint32_t rkey, UnpackKey(PackKey(0xdeadbeef), 1));
  EXPECT_EQ(rkey, 0xdeadbeefu);
  EXPECT_THAT(UnpackKey("garbage key", 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 4")));
  EXPECT_THAT(UnpackKey("XXXX1234", 4),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusTest, WorkCompletionErrorsMapToActionableCodes) {
  EXPECT_THAT(WorkCompletionError(IBV_WC_REM_ACCESS_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("rank 3")));
  EXPECT_THAT(WorkCompletionError(IBV_WC_RETRY_EXC_ERR, 3, "read"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rank 3 did not answer")));
  EXPECT_THAT(WorkCompletionError(IBV_WC_WR_FLUSH_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(WorkCompletionError(IBV_WC_LOC_PROT_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(VerbsError(ENOMEM, "ibv_create_qp"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("ibv_create_qp")));
}

TEST(StatusTest, DmaBufRefusalsSayWhatIsMissing) {
  EXPECT_THAT(DmaBufRegistrationError(EOPNOTSUPP, "rxe0", 4096),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("ibv_reg_dmabuf_mr of 4096 bytes"),
                             HasSubstr("rxe0"), HasSubstr("GPUDirect RDMA"),
                             HasSubstr("staged"))));
  EXPECT_THAT(DmaBufRegistrationError(ENOSYS, "mlx5_0", 1),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(DmaBufRegistrationError(EBADF, "mlx5_0", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a dma-buf")));
  EXPECT_THAT(DmaBufRegistrationError(ENOMEM, "mlx5_0", 1),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("mlx5_0")));
}

TEST(TransportTest, CreateWorksOrSaysWhyNot) {
  IbverbsTransportOptions options;
  absl::StatusOr<std::unique_ptr<IbverbsTransport>> transport =
      IbverbsTransport::Create(options);
  if (transport.ok()) {
    EXPECT_EQ((*transport)->capabilities().backend, "ibverbs");
    return;
  }
  // No device here: the reason says what to do.
  EXPECT_THAT(transport.status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AnyOf(HasSubstr("rdma link add"),
                             HasSubstr("active port"))));
  options.device.device = "no_such_device";
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(TransportTest, ABadJobTokenIsRefusedBeforeTheDevice) {
  IbverbsTransportOptions options;
  options.job_token = "";
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("job token")));
  options.job_token.reset();
  ScopedEnv token("RDMAFLOW_JOB_TOKEN", "");
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("RDMAFLOW_JOB_TOKEN")));
}

TEST(TransportTest, BadOptionsAreInvalidArguments) {
  IbverbsTransportOptions options;
  options.signal_every = 0;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("signal_every")));
  options = {};
  options.rank = -2;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = {};
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("world_size")));
  // More than a queue pair's depth (2 work requests per operation) holds.
  options = {};
  options.max_outstanding_per_endpoint = size_t{1} << 31;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_outstanding 1..2^31-3")));
}

// A registry parameter that does not fit its option's type is refused, not
// narrowed (port=4294967297 is not port 1), before any device is opened.
TEST(TransportTest, RegistryParametersThatDoNotFitAreRefused) {
  TransportRegistry registry;
  ASSERT_OK(RegisterIbverbsTransport(registry));
  for (const char* key : {"port", "world_size", "gid_index", "signal_every", "ack_timeout",
                          "retry_count"}) {
    TransportConfig config;
    config.params[key] = "4294967297";
    EXPECT_THAT(registry.Create("ibverbs", config).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fits its option")))
        << key;
  }
}

}  // namespace
}  // namespace rdmaflow::rdma::ibverbs
