#include "rdma/testing/transport_conformance.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma::testing {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kChildEnv[] = "RDMAFLOW_CONFORMANCE_CHILD";
constexpr char kChildFdEnv[] = "RDMAFLOW_CONFORMANCE_FD";
// Generous bound for "never hangs": a correct backend needs a small fraction
// of it; a hang shows up as this test's failure, not as a stuck CI.
constexpr absl::Duration kTimeout = absl::Seconds(60);

// Progresses every transport until `done()`, or fails at the deadline.
absl::Status Drive(std::initializer_list<Transport*> transports,
                   absl::FunctionRef<bool()> done,
                   absl::Duration timeout = kTimeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("conformance: operation never ended");
    }
    for (Transport* transport : transports) {
      absl::StatusOr<int> fired = transport->Progress();
      if (!fired.ok()) return fired.status();
    }
  }
  return absl::OkStatus();
}

// Deterministic bytes for a (seed, index): catches shifted or stale data.
void FillPattern(std::byte* data, size_t length, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < length; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = static_cast<std::byte>(x);
  }
}

// Records the result of one callback and checks it is never inline.
struct CallbackProbe {
  bool posting = false;
  int calls = 0;
  bool inline_call = false;
  absl::Status status;

  Completion Callback() {
    return [this](absl::Status s) {
      if (posting) inline_call = true;
      ++calls;
      status = std::move(s);
    };
  }
};

absl::StatusOr<std::unique_ptr<Endpoint>> ConnectTo(Transport& from,
                                                    Transport& to) {
  return from.Connect(PeerInfo{to.rank(), to.address()});
}

// Completions that use a test's locals. After a failed assertion returns
// early, the fixture (declared first, so destroyed last) still fires what
// was in flight as its transports go; guarded, those completions then do
// nothing. Declared after the locals they use, so it goes before them.
class Liveness {
 public:
  Liveness() = default;
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;
  ~Liveness() { *live_ = false; }

  Completion Guard(Completion done) const {
    return [live = live_, done = std::move(done)](absl::Status status) mutable {
      if (*live) std::move(done)(std::move(status));
    };
  }

 private:
  std::shared_ptr<bool> live_ = std::make_shared<bool>(true);
};

// The backend's memory for the data tests.
absl::StatusOr<MemoryRegion> AllocateFor(const ConformanceBackend& backend,
                                         Transport& transport, size_t bytes) {
  return backend.allocate ? backend.allocate(transport, bytes)
                          : transport.Allocate(bytes);
}

class Fixture {
 public:
  // Creates ranks 0 and 1 and an endpoint 0 -> 1. Returns kUnavailable if
  // the backend cannot run here.
  absl::Status Init(const ConformanceBackend& backend) {
    factory_ = backend.new_group();
    absl::StatusOr<std::unique_ptr<Transport>> a = factory_(0);
    if (!a.ok()) return a.status();
    a_ = *std::move(a);
    absl::StatusOr<std::unique_ptr<Transport>> b = factory_(1);
    if (!b.ok()) return b.status();
    b_ = *std::move(b);
    absl::StatusOr<std::unique_ptr<Endpoint>> ab = ConnectTo(*a_, *b_);
    if (!ab.ok()) return ab.status();
    ab_ = *std::move(ab);
    if (backend.connect_both_ways) {
      absl::StatusOr<std::unique_ptr<Endpoint>> ba = ConnectTo(*b_, *a_);
      if (!ba.ok()) return ba.status();
      ba_ = *std::move(ba);
    }
    backend_ = &backend;
    return absl::OkStatus();
  }

  absl::StatusOr<MemoryRegion> Allocate(Transport& transport, size_t bytes) {
    return AllocateFor(*backend_, transport, bytes);
  }

  // Posts with `post` (retrying on back-pressure) and drives both ranks
  // until the callback fired; returns its status.
  absl::Status Run(absl::FunctionRef<absl::Status(Completion)> post) {
    CallbackProbe probe;
    absl::Status posted;
    absl::Status driven = Drive({a_.get(), b_.get()}, [&] {
      probe.posting = true;
      posted = post(probe.Callback());
      probe.posting = false;
      return !absl::IsResourceExhausted(posted);
    });
    if (!driven.ok()) return driven;
    if (!posted.ok()) return posted;
    driven = Drive({a_.get(), b_.get()}, [&] { return probe.calls > 0; });
    if (!driven.ok()) return driven;
    EXPECT_FALSE(probe.inline_call) << "callback ran inline from Post*()";
    return probe.status;
  }

  absl::Status Write(const LocalSlice& src, const RemoteSlice& dst,
                     std::optional<uint32_t> notification = std::nullopt) {
    return Run([&](Completion done) {
      return ab_->PostWrite(src, dst, notification, std::move(done));
    });
  }
  absl::Status Read(const LocalSlice& dst, const RemoteSlice& src) {
    return Run([&](Completion done) {
      return ab_->PostRead(dst, src, std::move(done));
    });
  }
  absl::Status Flush() {
    return Run(
        [&](Completion done) { return ab_->PostFlush(std::move(done)); });
  }

  const ConformanceBackend* backend_ = nullptr;
  RankFactory factory_;
  std::unique_ptr<Transport> a_;
  std::unique_ptr<Transport> b_;
  std::unique_ptr<Endpoint> ab_;
  std::unique_ptr<Endpoint> ba_;  // connect_both_ways
};

#define RDMAFLOW_CONFORMANCE_SETUP(fixture)                          \
  Fixture fixture;                                                   \
  if (absl::Status init = fixture.Init(GetParam()); !init.ok()) {    \
    if (absl::IsUnavailable(init)) GTEST_SKIP() << init.message();   \
    FAIL() << init;                                                  \
  }

TEST_P(TransportConformanceTest, WritesAndReadsAreByteExact) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr size_t kMax = size_t{64} << 20;
  constexpr size_t kSlack = 64;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kMax + kSlack));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kMax + kSlack));
  const RemoteRegion& descriptor = remote.descriptor();

  for (size_t size : {size_t{1}, size_t{3}, size_t{64}, size_t{4097},
                      size_t{65537}, (size_t{1} << 20) + 7, kMax}) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    // Unaligned offsets on both sides; guard bytes around the target.
    const size_t local_offset = 3, remote_offset = 5;
    FillPattern(local.data() + local_offset, size, size);
    std::memset(remote.data(), 0xEE, kMax + kSlack);

    ASSERT_OK(f.Write({&local, local_offset, size},
                      {&descriptor, remote_offset, size}));
    ASSERT_OK(f.Flush());
    ASSERT_EQ(std::memcmp(remote.data() + remote_offset,
                          local.data() + local_offset, size),
              0)
        << "written bytes differ";
    EXPECT_EQ(remote.data()[remote_offset - 1], std::byte{0xEE});
    EXPECT_EQ(remote.data()[remote_offset + size], std::byte{0xEE});

    // Read it back into another unaligned place.
    const size_t read_offset = 11;
    FillPattern(remote.data() + remote_offset, size, size + 1);
    std::memset(local.data() + read_offset, 0, size);
    ASSERT_OK(
        f.Read({&local, read_offset, size}, {&descriptor, remote_offset, size}));
    ASSERT_EQ(std::memcmp(local.data() + read_offset,
                          remote.data() + remote_offset, size),
              0)
        << "read bytes differ";
  }
}

// What the slot rings rely on when a flag takes another endpoint than its
// data (onesided/slots/slot_link.h, flag_lane): a flush posted right
// behind writes still in flight completes only once they are visible at
// the peer, and a write posted then on a second endpoint to the peer lands
// beside them, not over them.
TEST_P(TransportConformanceTest, AFlushCoversWritesInFlightForAnotherEndpoint) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> second, ConnectTo(*f.a_, *f.b_));
  constexpr size_t kPiece = (size_t{1} << 20) + 7;
  constexpr int kPieces = 4;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kPieces * kPiece + 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kPieces * kPiece + 64));
  const RemoteRegion& descriptor = remote.descriptor();
  FillPattern(local.data(), kPieces * kPiece, 41);
  std::memset(remote.data(), 0xEE, kPieces * kPiece + 64);
  const size_t flag_at = kPieces * kPiece + 1;  // past the pieces, unaligned
  std::vector<CallbackProbe> writes(kPieces);
  CallbackProbe flushed;
  for (int i = 0; i < kPieces; ++i) {
    absl::Status posted;
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      posted = f.ab_->PostWrite({&local, i * kPiece, kPiece},
                                {&descriptor, i * kPiece, kPiece}, std::nullopt,
                                writes[i].Callback());
      return !absl::IsResourceExhausted(posted);
    }));
    ASSERT_OK(posted);
  }
  absl::Status posted;
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    posted = f.ab_->PostFlush(flushed.Callback());
    return !absl::IsResourceExhausted(posted);
  }));
  ASSERT_OK(posted);
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] { return flushed.calls > 0; }));
  ASSERT_OK(flushed.status);
  ASSERT_EQ(std::memcmp(remote.data(), local.data(), kPieces * kPiece), 0)
      << "a completed flush left written bytes not yet visible at the peer";
  for (const CallbackProbe& write : writes) EXPECT_EQ(write.calls, 1);
  FillPattern(local.data() + flag_at, 8, 42);
  CallbackProbe flag;
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    posted = second->PostWrite({&local, flag_at, 8}, {&descriptor, flag_at, 8}, std::nullopt,
                               flag.Callback());
    return !absl::IsResourceExhausted(posted);
  }));
  ASSERT_OK(posted);
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] { return flag.calls > 0; }));
  ASSERT_OK(flag.status);
  CallbackProbe landed;
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    posted = second->PostFlush(landed.Callback());
    return !absl::IsResourceExhausted(posted);
  }));
  ASSERT_OK(posted);
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] { return landed.calls > 0; }));
  ASSERT_OK(landed.status);
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), kPieces * kPiece), 0);
  EXPECT_EQ(std::memcmp(remote.data() + flag_at, local.data() + flag_at, 8), 0);
  EXPECT_EQ(remote.data()[flag_at - 1], std::byte{0xEE});
  EXPECT_EQ(remote.data()[flag_at + 8], std::byte{0xEE});
}

// Reads bound once per size (BindRead, from a descriptor gone before the
// posts) and posted 20 times each, the peer's bytes changed before every
// post: with a completion, and inline where the backend reads at once.
TEST_P(TransportConformanceTest, BoundReadsAreByteExact) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr size_t kMax = 65537;
  constexpr size_t kAt = 11, kFrom = 5;  // unaligned on both sides
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kMax + 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kMax + 64));
  std::memset(local.data(), 0xEE, kMax + 64);  // guard bytes around the target
  int tried_inline = 0, done_inline = 0;
  for (size_t size : {size_t{1}, size_t{64}, size_t{4097}, kMax}) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    std::unique_ptr<BoundRead> read;
    {
      const RemoteRegion copy = remote.descriptor();
      ASSERT_OK_AND_ASSIGN(read, f.ab_->BindRead({&local, kAt, size}, {&copy, kFrom, size}));
    }
    for (int round = 1; round <= 20; ++round) {
      SCOPED_TRACE(absl::StrCat("round ", round));
      FillPattern(remote.data() + kFrom, size, size * 100 + round);
      std::memset(local.data() + kAt, 0, size);
      bool done = false;
      if (round % 2 == 0) {
        ++tried_inline;
        ASSERT_OK_AND_ASSIGN(done, read->TryPostInline());
        done_inline += done ? 1 : 0;
      }
      if (!done) ASSERT_OK(f.Run([&](Completion c) { return read->Post(std::move(c)); }));
      ASSERT_EQ(std::memcmp(local.data() + kAt, remote.data() + kFrom, size), 0)
          << "read bytes differ";
      EXPECT_EQ(local.data()[kAt - 1], std::byte{0xEE}) << "a read wrote before its place";
      EXPECT_EQ(local.data()[kAt + size], std::byte{0xEE}) << "a read wrote past its place";
    }
  }
  // Inline always or never (the peer's memory maps here, or not), and an
  // inline read leaves nothing to fire.
  EXPECT_TRUE(done_inline == 0 || done_inline == tried_inline)
      << done_inline << " of " << tried_inline << " inline";
  int fired = 0;
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK_AND_ASSIGN(const int n, f.a_->Progress());
    fired += n;
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(fired, 0) << "an inline read left a completion to fire";
}

TEST_P(TransportConformanceTest, MalformedOrClosedBoundReadsAreRefused) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 64));
  const RemoteRegion& d = remote.descriptor();
  int calls = 0;
  auto must_not_run = [&calls](absl::Status) { ++calls; };
  // Past the peer's region or ours: refused at the binding or its post.
  auto bind_and_post = [&](const LocalSlice& dst, const RemoteSlice& src) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<BoundRead> read, f.ab_->BindRead(dst, src));
    return read->Post(must_not_run);
  };
  EXPECT_THAT(bind_and_post({&local, 0, 8}, {&d, 60, 8}), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(bind_and_post({&local, 60, 8}, {&d, 0, 8}), StatusIs(absl::StatusCode::kOutOfRange));
  // Bound before the endpoint closed: refused after, inline or posted.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundRead> read,
                       f.ab_->BindRead({&local, 0, 8}, {&d, 0, 8}));
  ASSERT_OK(f.ab_->Close());
  const absl::StatusOr<bool> done_now = read->TryPostInline();
  if (done_now.ok()) {
    EXPECT_FALSE(*done_now) << "an inline read went out on a closed endpoint";
  } else {
    EXPECT_THAT(done_now.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_THAT(read->Post(must_not_run), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(bind_and_post({&local, 0, 8}, {&d, 0, 8}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(calls, 0) << "a refused read's callback ran";
}

TEST_P(TransportConformanceTest, RegisteredCallerMemoryWorks) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  std::vector<std::byte> source(10000);
  FillPattern(source.data(), source.size(), 42);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local,
                       f.a_->Register(absl::MakeSpan(source)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, source.size()));
  ASSERT_OK(f.Write(WholeRegion(local), WholeRegion(remote.descriptor())));
  ASSERT_OK(f.Flush());
  EXPECT_EQ(std::memcmp(remote.data(), source.data(), source.size()), 0);
}

TEST_P(TransportConformanceTest, NotificationsArriveOnceInPostOrderAfterData) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr uint32_t kCount = 300;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 8 * kCount));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 8 * kCount));
  for (uint32_t i = 0; i < kCount; ++i) {
    const uint64_t value = 1000 + i;
    std::memcpy(local.data() + 8 * i, &value, 8);
  }

  std::vector<Notification> received;
  std::vector<uint64_t> seen_data;
  auto drain = [&] {
    while (std::optional<Notification> n = f.b_->PollNotification()) {
      received.push_back(*n);
      // The data of write i must be visible when notification i arrives.
      uint64_t value = 0;
      std::memcpy(&value, remote.data() + 8 * (n->value % kCount), 8);
      seen_data.push_back(value);
    }
  };
  int completions = 0;
  for (uint32_t i = 0; i < kCount; ++i) {
    absl::Status posted;
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      posted = f.ab_->PostWrite({&local, 8 * i, 8},
                                {&remote.descriptor(), 8 * i, 8}, i,
                                [&](absl::Status s) {
                                  EXPECT_OK(s);
                                  ++completions;
                                });
      drain();
      return !absl::IsResourceExhausted(posted);
    }));
    ASSERT_OK(posted);
  }
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    drain();
    return received.size() >= kCount && completions == int{kCount};
  }));
  // A few more rounds must not deliver anything twice.
  for (int round = 0; round < 100; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
    drain();
  }
  ASSERT_EQ(received.size(), kCount);
  for (uint32_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(received[i].peer_rank, 0);
    EXPECT_EQ(received[i].value, i) << "notifications out of post order";
    EXPECT_EQ(seen_data[i], 1000 + received[i].value)
        << "notification " << i << " arrived before its data";
  }
}

// Posts one flagged write with `post` (retrying on back-pressure) while
// driving both ranks; then drives until `flag` is seen in `word` (rank 1's
// memory) and the write's callback fired. Returns the callback's status.
absl::Status FlaggedWrite(Fixture& f, absl::FunctionRef<absl::Status(Completion)> post,
                          const std::byte* word, uint64_t flag,
                          absl::FunctionRef<void()> on_flag) {
  CallbackProbe probe;
  absl::Status posted;
  RETURN_IF_ERROR(Drive({f.a_.get(), f.b_.get()}, [&] {
    probe.posting = true;
    posted = post(probe.Callback());
    probe.posting = false;
    return !absl::IsResourceExhausted(posted);
  }));
  RETURN_IF_ERROR(posted);
  bool seen = false;
  RETURN_IF_ERROR(Drive({f.a_.get(), f.b_.get()}, [&] {
    if (!seen && LoadSharedWord(word) == flag) {
      seen = true;
      on_flag();  // What rank 1 sees the moment the flag is there.
    }
    return seen && probe.calls > 0;
  }));
  EXPECT_FALSE(probe.inline_call) << "callback ran inline from a flagged write's post";
  EXPECT_EQ(probe.calls, 1);
  return probe.status;
}

// One flagged write through Endpoint::PostWriteWithFlag (FlaggedWrite).
absl::Status WriteWithFlag(Fixture& f, const LocalSlice& src,
                           const RemoteSlice& dst, const RemoteSlice& flag_word,
                           const std::byte* word, uint64_t flag,
                           absl::FunctionRef<void()> on_flag) {
  return FlaggedWrite(
      f,
      [&](Completion done) {
        return f.ab_->PostWriteWithFlag(src, dst, flag_word, flag, std::move(done));
      },
      word, flag, on_flag);
}

// Binds a flagged write and posts it once with `flag`: the binding's
// refusal, else the post's (a backend may check at either).
absl::Status BindAndPost(Fixture& f, const LocalSlice& src, const RemoteSlice& dst,
                         const RemoteSlice& flag_word, uint64_t flag, Completion done) {
  ASSIGN_OR_RETURN(std::unique_ptr<BoundFlaggedWrite> write,
                   f.ab_->BindFlaggedWrite(src, dst, flag_word));
  return write->Post(flag, std::move(done));
}

TEST_P(TransportConformanceTest, FlaggedWritesShowTheirDataWithTheFlag) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr size_t kData = 4096 + 5;
  constexpr size_t kFlagAt = 4096 + 8;  // right behind the data
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 3 * kData));
  constexpr size_t kEarlierAt = kFlagAt + 8;  // where a plain write goes
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kEarlierAt + 8));
  ASSERT_OK_AND_ASSIGN(MemoryRegion other, f.Allocate(*f.b_, 64));
  const RemoteRegion& d = remote.descriptor();
  if (!f.a_->capabilities().flag_writes) {
    CallbackProbe probe;
    EXPECT_THAT(f.ab_->PostWriteWithFlag({&local, 0, 8}, {&d, 0, 8},
                                         {&d, kFlagAt, 8}, 1, probe.Callback()),
                StatusIs(absl::StatusCode::kUnimplemented));
    for (int round = 0; round < 10; ++round) {
      ASSERT_OK(f.a_->Progress().status());
      ASSERT_OK(f.b_->Progress().status());
    }
    EXPECT_THAT(BindAndPost(f, {&local, 0, 8}, {&d, 0, 8}, {&d, kFlagAt, 8}, 1,
                            probe.Callback()),
                StatusIs(absl::StatusCode::kUnimplemented));
    for (int round = 0; round < 10; ++round) {
      ASSERT_OK(f.a_->Progress().status());
      ASSERT_OK(f.b_->Progress().status());
    }
    EXPECT_EQ(probe.calls, 0) << "a refused post's callback ran";
    GTEST_SKIP() << f.a_->capabilities().backend
                 << " has no flagged writes (it says so and refuses them)";
  }
  // Flags behind the data, in another region, and after a plain write
  // posted just before (which the flag must cover too); each write posted
  // as it comes (PostWriteWithFlag), then through bindings made once per
  // size and place of the flag (BindFlaggedWrite) and posted many times,
  // then through the same bindings inline where the backend writes at once
  // (TryPostInline; else posted with a completion).
  const std::byte* behind = remote.data() + kFlagAt;
  const std::byte* elsewhere = other.data() + 8;
  std::map<std::pair<size_t, bool>, std::unique_ptr<BoundFlaggedWrite>> bindings;
  int done_inline = 0, plain_posted = 0, plain_done = 0;
  int plain_before_inline = 0;  // plain writes posted before mode 2
  for (const int mode : {0, 1, 2}) {
    const bool bound = mode > 0;
    SCOPED_TRACE(mode == 0 ? "posted as they come" : mode == 1 ? "bound" : "bound, inline");
    if (mode == 2) {
      // Every completion so far fired: what fires from here is counted.
      ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] { return plain_done == plain_posted; }));
      plain_before_inline = plain_posted;
    }
    for (uint64_t i = 1; i <= 200; ++i) {
      SCOPED_TRACE(absl::StrCat("write ", i));
      const uint64_t flag = 1000 * mode + i;
      const size_t bytes = i % 3 == 0 ? 8 : i % 3 == 1 ? 64 : kData;
      FillPattern(local.data(), bytes, flag);
      FillPattern(local.data() + kData, 8, flag + 10000);
      const bool other_region = i % 2 == 0;
      const LocalSlice src{&local, 0, bytes};
      const RemoteSlice dst{&d, 0, bytes};
      const RemoteSlice flag_word = other_region ? RemoteSlice{&other.descriptor(), 8, 8}
                                                 : RemoteSlice{&d, kFlagAt, 8};
      if (i % 5 == 0) {
        // A plain write of 8 bytes behind the flag, posted first.
        ASSERT_OK(f.ab_->PostWrite({&local, kData, 8}, {&d, kEarlierAt, 8}, std::nullopt,
                                   [&plain_done](absl::Status s) {
                                     EXPECT_OK(s);
                                     ++plain_done;
                                   }));
        ++plain_posted;
      }
      std::unique_ptr<BoundFlaggedWrite>& binding = bindings[{bytes, other_region}];
      if (bound && binding == nullptr) {
        ASSERT_OK_AND_ASSIGN(binding, f.ab_->BindFlaggedWrite(src, dst, flag_word));
      }
      bool data_whole = false, earlier_whole = true;
      const std::byte* word = other_region ? elsewhere : behind;
      if (mode == 2) {
        ASSERT_OK_AND_ASSIGN(const bool done_now, binding->TryPostInline(flag));
        if (done_now) {
          // Done before the call returned: the peer sees all of it with no
          // progress of either rank, and no completion is left to fire.
          ++done_inline;
          EXPECT_EQ(LoadSharedWord(word), flag) << "an inline write's flag is not there";
          EXPECT_EQ(std::memcmp(remote.data(), local.data(), bytes), 0)
              << "an inline write's data is not there with its flag";
          if (i % 5 == 0) {
            EXPECT_EQ(std::memcmp(remote.data() + kEarlierAt, local.data() + kData, 8), 0)
                << "an inline write's flag is there before an earlier write's data";
          }
          continue;
        }
      }
      ASSERT_OK(FlaggedWrite(
          f,
          [&](Completion done) {
            return bound ? binding->Post(flag, std::move(done))
                         : f.ab_->PostWriteWithFlag(src, dst, flag_word, flag, std::move(done));
          },
          word, flag, [&] {
            data_whole = std::memcmp(remote.data(), local.data(), bytes) == 0;
            if (i % 5 == 0) {
              earlier_whole =
                  std::memcmp(remote.data() + kEarlierAt, local.data() + kData, 8) == 0;
            }
          }));
      EXPECT_TRUE(data_whole) << "the flag was seen before its data";
      EXPECT_TRUE(earlier_whole) << "the flag was seen before an earlier write's data";
    }
  }
  // Every write done inline or none (the backend writes at once into this
  // peer's memory, or never): plain writes here go where the flags go.
  ASSERT_TRUE(done_inline == 0 || done_inline == 200) << done_inline << " of 200 inline";
  if (done_inline == 0) return;
  // No progress ran since the inline writes began: what fires now is all
  // they and the plain writes among them left, and they must have left
  // nothing.
  int fired = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int round = 0; plain_done < plain_posted || round < 10; ++round) {
    ASSERT_LT(absl::Now(), deadline) << "the plain writes' completions never fired";
    ASSERT_OK_AND_ASSIGN(const int n, f.a_->Progress());
    fired += n;
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(fired, plain_posted - plain_before_inline)
      << "an inline write left a completion to fire";
}

TEST_P(TransportConformanceTest, WritesLandInPostOrderWhereTheEndpointSaysSo) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  if (!f.ab_->OrdersWrites()) {
    GTEST_SKIP() << f.a_->capabilities().backend
                 << ": this endpoint does not order its writes (a flag follows a flush)";
  }
  // A payload of many of the transport's segments, then an 8-byte flag
  // posted at once behind it with no flush: rank 1 must never see the flag
  // before every byte of the payload, round after round. A thread of its
  // own watches rank 1's memory while this one progresses both ranks, so
  // that it sees the words land one by one, not only between two calls of
  // Progress() (one of which may place the flag and the payload both).
  constexpr size_t kBig = (size_t{1} << 20) + 16;
  constexpr size_t kFlagAt = kBig + 8;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kBig + 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kBig + 64));
  const RemoteRegion& d = remote.descriptor();
  std::atomic<uint64_t> expected{0}, checked{0};
  std::atomic<size_t> expected_bytes{0};
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread watcher([&] {
    while (!stop.load(std::memory_order_acquire)) {
      const uint64_t round = expected.load(std::memory_order_acquire);
      if (round == 0 || checked.load(std::memory_order_relaxed) == round ||
          LoadSharedWord(remote.data() + kFlagAt) != round) {
        std::this_thread::yield();  // two cores: leave the progress its turn
        continue;
      }
      const size_t bytes = expected_bytes.load(std::memory_order_relaxed);
      if (std::memcmp(remote.data(), local.data(), bytes) != 0) torn.fetch_add(1);
      checked.store(round, std::memory_order_release);
    }
  });
  // Stopped and joined on every way out, a failed assertion's too.
  absl::Cleanup join_watcher = [&] {
    stop.store(true, std::memory_order_release);
    watcher.join();
  };
  for (uint64_t round = 1; round <= 24; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const size_t bytes = round % 3 == 0 ? 4096 + round : kBig - 8 * (round % 5);
    FillPattern(local.data(), bytes, round);
    StoreSharedWord(local.data() + kFlagAt, round);
    expected_bytes.store(bytes, std::memory_order_relaxed);
    expected.store(round, std::memory_order_release);
    int done = 0;
    auto count = [&done](absl::Status status) {
      EXPECT_OK(status);
      ++done;
    };
    absl::Status posted;
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      posted = f.ab_->PostWrite({&local, 0, bytes}, {&d, 0, bytes}, std::nullopt, count);
      return !absl::IsResourceExhausted(posted);
    }));
    ASSERT_OK(posted);
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      posted = f.ab_->PostWrite({&local, kFlagAt, 8}, {&d, kFlagAt, 8}, std::nullopt, count);
      return !absl::IsResourceExhausted(posted);
    }));
    ASSERT_OK(posted);
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      return done == 2 && checked.load(std::memory_order_acquire) == round;
    }));
  }
  std::move(join_watcher).Invoke();
  EXPECT_EQ(torn.load(), 0) << "a flag landed before the payload posted ahead of it";
}

TEST_P(TransportConformanceTest, FlaggedWritesIntoCallerMemory) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  if (!f.a_->capabilities().flag_writes) {
    GTEST_SKIP() << f.a_->capabilities().backend << " has no flagged writes";
  }
  if (f.backend_->allocate) GTEST_SKIP() << "the backend's data memory is not host memory";
  // Memory the peer registered (on UCX not shared: the data goes by put,
  // the flag behind a flush), with the flag in it or in shared memory.
  std::vector<std::byte> target(4096 + 64);
  ASSERT_OK_AND_ASSIGN(MemoryRegion registered, f.b_->Register(absl::MakeSpan(target)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion shared, f.Allocate(*f.b_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 4096));
  const RemoteRegion& d = registered.descriptor();
  for (uint64_t i = 1; i <= 20; ++i) {
    SCOPED_TRACE(absl::StrCat("write ", i));
    FillPattern(local.data(), 4096, i);
    const bool in_shared = i % 2 == 0;
    bool data_whole = false;
    ASSERT_OK(WriteWithFlag(
        f, {&local, 0, 4096}, {&d, 0, 4096},
        in_shared ? RemoteSlice{&shared.descriptor(), 0, 8} : RemoteSlice{&d, 4096, 8},
        in_shared ? shared.data() : target.data() + 4096, i, [&] {
          data_whole = std::memcmp(target.data(), local.data(), 4096) == 0;
        }));
    EXPECT_TRUE(data_whole) << "the flag was seen before its data";
  }
}

TEST_P(TransportConformanceTest, MalformedOrClosedFlaggedWritesAreRefusedBeforePosting) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  if (!f.a_->capabilities().flag_writes) {
    GTEST_SKIP() << f.a_->capabilities().backend << " has no flagged writes";
  }
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 64));
  const RemoteRegion& d = remote.descriptor();
  int calls = 0;
  auto must_not_run = [&calls](absl::Status) { ++calls; };
  const LocalSlice src{&local, 0, 8};
  const RemoteSlice dst{&d, 0, 8};
  // Not a word, not aligned, past the end, a bad data slice, and inside
  // the data it writes: each posted as it comes, then bound (refused at
  // the binding or its post).
  for (const bool bound : {false, true}) {
    SCOPED_TRACE(bound ? "bound" : "posted as it comes");
    auto post = [&](const LocalSlice& data, const RemoteSlice& to, const RemoteSlice& word) {
      return bound ? BindAndPost(f, data, to, word, 1, must_not_run)
                   : f.ab_->PostWriteWithFlag(data, to, word, 1, must_not_run);
    };
    EXPECT_THAT(post(src, dst, {&d, 8, 4}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8-byte aligned")));
    EXPECT_THAT(post(src, dst, {&d, 12, 8}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8-byte aligned")));
    EXPECT_THAT(post(src, dst, {&d, 64, 8}), StatusIs(absl::StatusCode::kOutOfRange));
    EXPECT_THAT(post(src, {&d, 60, 8}, {&d, 8, 8}), StatusIs(absl::StatusCode::kOutOfRange));
    EXPECT_THAT(post({&local, 0, 16}, {&d, 0, 16}, {&d, 8, 8}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inside the written")));
  }
  // A binding made before the endpoint closed is refused after, as a
  // binding or a post after it.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> write,
                       f.ab_->BindFlaggedWrite(src, dst, {&d, 8, 8}));
  ASSERT_OK(f.ab_->Close());
  EXPECT_THAT(write->Post(7, must_not_run), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Inline: refused, or not done at once (and then Post() refuses it).
  const absl::StatusOr<bool> done_now = write->TryPostInline(8);
  if (done_now.ok()) {
    EXPECT_FALSE(*done_now) << "an inline write went out on a closed endpoint";
  } else {
    EXPECT_THAT(done_now.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_THAT(BindAndPost(f, src, dst, {&d, 8, 8}, 1, must_not_run),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(calls, 0) << "a refused post's callback ran";
  EXPECT_EQ(LoadSharedWord(remote.data() + 8), 0u) << "a refused flag landed";
}


TEST_P(TransportConformanceTest, BoundFlaggedWritesStayBehindWritesIntoCallerMemory) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  if (!f.a_->capabilities().flag_writes) {
    GTEST_SKIP() << f.a_->capabilities().backend << " has no flagged writes";
  }
  if (f.backend_->allocate) GTEST_SKIP() << "the backend's data memory is not host memory";
  // A binding made while every write went into shared memory, then a
  // 1 MiB write into memory the peer registered (on UCX not shared: a put
  // still moving when it returns) just before each post: the flag, stored
  // through the mapping, must not pass it.
  constexpr size_t kEarlier = 1 << 20;
  std::vector<std::byte> target(kEarlier);
  ASSERT_OK_AND_ASSIGN(MemoryRegion registered, f.b_->Register(absl::MakeSpan(target)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion shared, f.Allocate(*f.b_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kEarlier + 8));
  const RemoteRegion& d = shared.descriptor();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> write,
                       f.ab_->BindFlaggedWrite({&local, kEarlier, 8}, {&d, 0, 8}, {&d, 8, 8}));
  for (uint64_t i = 1; i <= 20; ++i) {
    SCOPED_TRACE(absl::StrCat("write ", i));
    FillPattern(local.data(), kEarlier, i);
    ASSERT_OK(f.ab_->PostWrite({&local, 0, kEarlier}, {&registered.descriptor(), 0, kEarlier},
                               std::nullopt, [](absl::Status s) { EXPECT_OK(s); }));
    bool earlier_whole = false;
    if (i % 2 == 1) {
      // Inline, where the backend can write at once: the flag must still
      // not pass the write before it (UCX: no inline write behind a put).
      ASSERT_OK_AND_ASSIGN(const bool done_now, write->TryPostInline(i));
      if (done_now) {
        EXPECT_EQ(LoadSharedWord(shared.data() + 8), i);
        EXPECT_EQ(std::memcmp(target.data(), local.data(), kEarlier), 0)
            << "an inline write's flag is there before an earlier write's data";
        continue;
      }
    }
    ASSERT_OK(FlaggedWrite(
        f, [&](Completion done) { return write->Post(i, std::move(done)); },
        shared.data() + 8, i,
        [&] { earlier_whole = std::memcmp(target.data(), local.data(), kEarlier) == 0; }));
    EXPECT_TRUE(earlier_whole) << "the flag was seen before an earlier write's data";
  }
}

TEST_P(TransportConformanceTest, CallbacksFireExactlyOnceAndNeverInline) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 4096));
  CallbackProbe write, notified, read, flush;
  auto post = [](CallbackProbe& probe, auto&& fn) {
    probe.posting = true;
    absl::Status status = fn(probe.Callback());
    probe.posting = false;
    return status;
  };
  const LocalSlice src{&local, 0, 1024};
  const RemoteSlice dst{&remote.descriptor(), 0, 1024};
  ASSERT_OK(post(write, [&](Completion done) {
    return f.ab_->PostWrite(src, dst, std::nullopt, std::move(done));
  }));
  ASSERT_OK(post(notified, [&](Completion done) {
    return f.ab_->PostWrite(src, dst, 7u, std::move(done));
  }));
  ASSERT_OK(post(read, [&](Completion done) {
    return f.ab_->PostRead({&local, 2048, 1024}, dst, std::move(done));
  }));
  ASSERT_OK(post(flush, [&](Completion done) {
    return f.ab_->PostFlush(std::move(done));
  }));
  for (CallbackProbe* probe : {&write, &notified, &read, &flush}) {
    EXPECT_EQ(probe->calls, 0) << "callback ran inline from Post*()";
  }
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    return write.calls && notified.calls && read.calls && flush.calls;
  }));
  for (int round = 0; round < 100; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  for (CallbackProbe* probe : {&write, &notified, &read, &flush}) {
    EXPECT_EQ(probe->calls, 1);
    EXPECT_FALSE(probe->inline_call);
    EXPECT_OK(probe->status);
  }
}

// What a completion handler may do (rdma/endpoint.h): drop the endpoint
// whose operation just completed, with operations of it still in flight,
// progress the transport again from inside the callback, connect anew and
// post on the new endpoint. Every operation still completes exactly once,
// and the new endpoint's write lands.
TEST_P(TransportConformanceTest,
       ACallbackMayDropItsEndpointProgressAndConnectAgain) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr size_t kBytes = 4096;
  constexpr uint32_t kNotice = 77;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 2 * kBytes));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 2 * kBytes));
  // One operation behind the first (its queue empties as the callback
  // runs), then several.
  for (int behind : {0, 3}) {
    SCOPED_TRACE(absl::StrCat(behind, " operations behind the first"));
    FillPattern(local.data(), 2 * kBytes, 31 + behind);
    std::memset(remote.data(), 0, 2 * kBytes);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> first,
                         ConnectTo(*f.a_, *f.b_));
    std::unique_ptr<Endpoint> next;
    absl::Status nested, reconnected, reposted;
    CallbackProbe last;
    std::vector<CallbackProbe> probes(1 + behind);
    std::optional<Notification> notice;
    const RemoteSlice head{&remote.descriptor(), 0, kBytes};
    const Liveness alive;
    ASSERT_OK(first->PostWrite(
        {&local, 0, kBytes}, head, std::nullopt,
        alive.Guard([&, done = probes[0].Callback()](absl::Status s) mutable {
          std::move(done)(std::move(s));
          first.reset();
          nested = f.a_->Progress().status();
          absl::StatusOr<std::unique_ptr<Endpoint>> again =
              ConnectTo(*f.a_, *f.b_);
          reconnected = again.status();
          if (!again.ok()) return;
          next = *std::move(again);
          last.posting = true;
          reposted = next->PostWrite({&local, kBytes, kBytes},
                                     {&remote.descriptor(), kBytes, kBytes},
                                     kNotice, alive.Guard(last.Callback()));
          last.posting = false;
        })));
    for (int i = 1; i <= behind; ++i) {
      ASSERT_OK(first->PostWrite({&local, 0, kBytes}, head, std::nullopt,
                                 alive.Guard(probes[i].Callback())));
    }
    ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
      if (!notice.has_value()) notice = f.b_->PollNotification();
      const bool all =
          std::all_of(probes.begin(), probes.end(),
                      [](const CallbackProbe& p) { return p.calls > 0; });
      const bool posted = reconnected.ok() && reposted.ok();
      return all && (!posted || (last.calls > 0 && notice.has_value()));
    }));
    ASSERT_OK(nested) << "Progress() from inside a completion callback";
    ASSERT_OK(reconnected) << "Connect() from inside a completion callback";
    ASSERT_OK(reposted)
        << "a post on the new endpoint from inside a completion callback";
    for (int round = 0; round < 100; ++round) {
      ASSERT_OK(f.a_->Progress().status());
      ASSERT_OK(f.b_->Progress().status());
    }
    EXPECT_EQ(probes[0].calls, 1);
    EXPECT_OK(probes[0].status);
    for (int i = 1; i <= behind; ++i) {
      EXPECT_EQ(probes[i].calls, 1) << "operation " << i;
      EXPECT_THAT(probes[i].status,
                  AnyOf(IsOk(), StatusIs(absl::StatusCode::kCancelled)))
          << "operation " << i;
    }
    EXPECT_EQ(last.calls, 1);
    EXPECT_FALSE(last.inline_call) << "callback ran inline from Post*()";
    EXPECT_OK(last.status);
    EXPECT_EQ(notice->peer_rank, f.a_->rank());
    EXPECT_EQ(notice->value, kNotice);
    EXPECT_EQ(
        std::memcmp(remote.data() + kBytes, local.data() + kBytes, kBytes), 0)
        << "the new endpoint's write did not land before its notification";
  }
}

// An operation's memory is the caller's again once its completion fires,
// whatever its status: the source of a write and the destination of a read
// of an endpoint closed with them in flight (several chunks each on the
// staged path) are touched by nothing after that, and closing ends them
// without the peer's progress (unless the backend says it needs it).
// Their completions scribble over both; a write, a read and a flush
// through another endpoint to the peer, posted after and done behind them,
// then find no scribble at the peer and nothing but the scribble in the
// destination, and the write landed.
TEST_P(TransportConformanceTest, ACancelledOperationLeavesItsMemoryAlone) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr size_t kBytes = size_t{4} << 20;
  constexpr size_t kMarker = 64;
  constexpr int kScribble = 0x5A;
  constexpr int kUntouched = 0xEE;
  // Local: the write's source, then the read's destination, then the
  // marker write's source and the marker read's destination. Remote: the
  // write's target, the read's source, the marker's.
  ASSERT_OK_AND_ASSIGN(MemoryRegion local,
                       f.Allocate(*f.a_, 2 * kBytes + 2 * kMarker));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote,
                       f.Allocate(*f.b_, 2 * kBytes + kMarker));
  const RemoteRegion& far = remote.descriptor();
  FillPattern(local.data(), kBytes, 41);
  std::memset(local.data() + kBytes, 0, kBytes);
  std::memset(remote.data(), kUntouched, kBytes);
  FillPattern(remote.data() + kBytes, kBytes, 43);
  const std::vector<std::byte> source(local.data(), local.data() + kBytes);
  const size_t mark = 2 * kBytes;
  // The link in use first (the staged path's peer has published its slots),
  // so that what the close cancels below is under way.
  ASSERT_OK(f.Write({&local, mark, kMarker}, {&far, mark, kMarker}));
  CallbackProbe wrote, read, marked, fetched, flushed;
  std::unique_ptr<Endpoint> after;
  const Liveness alive;
  ASSERT_OK(f.ab_->PostWrite(
      {&local, 0, kBytes}, {&far, 0, kBytes}, std::nullopt,
      alive.Guard([&, done = wrote.Callback()](absl::Status s) mutable {
        std::memset(local.data(), kScribble, kBytes);
        std::move(done)(std::move(s));
      })));
  ASSERT_OK(f.ab_->PostRead(
      {&local, kBytes, kBytes}, {&far, kBytes, kBytes},
      alive.Guard([&, done = read.Callback()](absl::Status s) mutable {
        std::memset(local.data() + kBytes, kScribble, kBytes);
        std::move(done)(std::move(s));
      })));
  // Both ranks move them on a little (staged: some chunks copied, written
  // or landed, answers queued), then the endpoint closes: every outcome is
  // one the checks below accept.
  for (int round = 0; round < 4; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  ASSERT_OK(f.ab_->Close());
  // Closing ends them without the peer's progress (rank 1 is not driven
  // until they completed), where the backend says so.
  const bool alone = !f.backend_->close_needs_peer_progress;
  ASSERT_OK(Drive(alone ? std::initializer_list<Transport*>{f.a_.get()}
                        : std::initializer_list<Transport*>{f.a_.get(), f.b_.get()},
                  [&] { return wrote.calls > 0 && read.calls > 0; }));
  EXPECT_THAT(wrote.status,
              AnyOf(IsOk(), StatusIs(absl::StatusCode::kCancelled)));
  EXPECT_THAT(read.status,
              AnyOf(IsOk(), StatusIs(absl::StatusCode::kCancelled)));

  ASSERT_OK_AND_ASSIGN(after, ConnectTo(*f.a_, *f.b_));
  FillPattern(local.data() + mark, kMarker, 47);
  ASSERT_OK(after->PostWrite({&local, mark, kMarker}, {&far, mark, kMarker},
                             std::nullopt, alive.Guard(marked.Callback())));
  ASSERT_OK(after->PostRead({&local, mark + kMarker, kMarker}, {&far, mark, kMarker},
                            alive.Guard(fetched.Callback())));
  ASSERT_OK(after->PostFlush(alive.Guard(flushed.Callback())));
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    return marked.calls > 0 && fetched.calls > 0 && flushed.calls > 0;
  }));
  EXPECT_OK(marked.status);
  EXPECT_OK(fetched.status);
  EXPECT_OK(flushed.status);
  for (int round = 0; round < 100; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(wrote.calls, 1);
  EXPECT_EQ(read.calls, 1);
  // The link to the peer goes on behind the cancelled operations.
  EXPECT_EQ(std::memcmp(remote.data() + mark, local.data() + mark, kMarker), 0)
      << "the write through another endpoint, after the cancelled ones, did not land";
  // At the peer, each byte is untouched or the source's from before the
  // write's completion.
  size_t late = 0, first_late = 0;
  for (size_t i = 0; i < kBytes; ++i) {
    const int at = std::to_integer<int>(remote.data()[i]);
    if (at != kUntouched && remote.data()[i] != source[i]) {
      if (late++ == 0) first_late = i;
    }
  }
  EXPECT_EQ(late, 0u) << "bytes of the write's source as it was after its "
                         "completion reached the "
                      << "peer, the first at offset " << first_late;
  size_t landed = 0;
  for (size_t i = kBytes; i < 2 * kBytes; ++i) {
    landed += std::to_integer<int>(local.data()[i]) != kScribble;
  }
  EXPECT_EQ(landed, 0u)
      << "bytes of the read landed in its destination after its completion";
}

TEST_P(TransportConformanceTest, OutOfBoundsIsRejectedBeforePosting) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 8192));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 4096));
  const RemoteRegion& d = remote.descriptor();
  auto must_not_run = [](absl::Status s) {
    ADD_FAILURE() << "callback of a rejected operation ran: " << s;
  };
  // Past the end of the remote region, by one byte and by a lot.
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 100}, {&d, 3997, 100}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank 1")));
  EXPECT_THAT(f.ab_->PostRead({&local, 0, 16}, {&d, uint64_t{1} << 62, 16},
                              must_not_run),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Offsets that overflow when added to the length.
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 16}, {&d, ~uint64_t{0} - 4, 16},
                               std::nullopt, must_not_run),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Past the end of the local region.
  EXPECT_THAT(f.ab_->PostWrite({&local, 8190, 16}, {&d, 0, 16}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Zero or mismatched lengths.
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 0}, {&d, 0, 0}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.ab_->PostRead({&local, 0, 8}, {&d, 0, 16}, must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Null regions.
  EXPECT_THAT(f.ab_->PostWrite({nullptr, 0, 8}, {&d, 0, 8}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 8}, {nullptr, 0, 8}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (int round = 0; round < 50; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  for (size_t i = 0; i < remote.size(); ++i) {
    ASSERT_EQ(remote.data()[i], std::byte{0}) << "a rejected write landed";
  }
}

TEST_P(TransportConformanceTest, MalformedDescriptorsAreRejected) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 4096));
  auto must_not_run = [](absl::Status s) {
    ADD_FAILURE() << "callback of a rejected operation ran: " << s;
  };
  const std::string wire = remote.descriptor().Serialize();
  EXPECT_THAT(RemoteRegion::Parse(""),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RemoteRegion::Parse("definitely not a descriptor"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RemoteRegion::Parse(wire.substr(0, wire.size() / 2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(RemoteRegion round_trip, RemoteRegion::Parse(wire));
  EXPECT_EQ(round_trip.packed_key, remote.descriptor().packed_key);

  // A descriptor of another rank (rank 0's own region) on the endpoint to 1.
  EXPECT_THAT(
      f.ab_->PostWrite({&local, 0, 8}, {&local.descriptor(), 0, 8},
                       std::nullopt, must_not_run),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0")));
  // Another backend's descriptor.
  RemoteRegion foreign = remote.descriptor();
  foreign.backend = "some_other_backend";
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 8}, {&foreign, 0, 8}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A corrupted remote key.
  RemoteRegion corrupt = remote.descriptor();
  corrupt.packed_key = "garbage key";
  EXPECT_THAT(f.ab_->PostWrite({&local, 0, 8}, {&corrupt, 0, 8}, std::nullopt,
                               must_not_run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  corrupt.packed_key = remote.descriptor().packed_key;
  corrupt.packed_key[corrupt.packed_key.size() / 2] ^= 0x5A;
  // Flipped bits are caught at post or at completion, never silently used.
  absl::Status flipped = f.Write({&local, 0, 8}, {&corrupt, 0, 8});
  EXPECT_THAT(flipped, AnyOf(StatusIs(absl::StatusCode::kInvalidArgument),
                             StatusIs(absl::StatusCode::kPermissionDenied)));
}

TEST_P(TransportConformanceTest, FullQueueIsResourceExhaustedNotBlocking) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  const size_t limit = f.a_->capabilities().max_outstanding_per_endpoint;
  ASSERT_GT(limit, 0u);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 64));
  int completions = 0;
  size_t accepted = 0;
  absl::Status status;
  while (accepted <= limit) {
    status = f.ab_->PostWrite({&local, 0, 8}, {&remote.descriptor(), 0, 8},
                              std::nullopt,
                              [&](absl::Status s) {
                                EXPECT_OK(s);
                                ++completions;
                              });
    if (!status.ok()) break;
    ++accepted;
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr("rank 1")));
  EXPECT_EQ(accepted, limit);
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()},
                  [&] { return completions == static_cast<int>(accepted); }));
  EXPECT_OK(f.Write({&local, 0, 8}, {&remote.descriptor(), 0, 8}));
}

TEST_P(TransportConformanceTest, BoundFlaggedWritesPushBackAtTheLimit) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  if (!f.a_->capabilities().flag_writes) {
    GTEST_SKIP() << f.a_->capabilities().backend << " has no flagged writes";
  }
  if (f.backend_->allocate) GTEST_SKIP() << "the flag is polled in host memory";
  const size_t limit = f.a_->capabilities().max_outstanding_per_endpoint;
  ASSERT_GT(limit, 0u);
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, 64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, 64));
  const RemoteRegion& d = remote.descriptor();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> write,
                       f.ab_->BindFlaggedWrite({&local, 0, 8}, {&d, 0, 8}, {&d, 8, 8}));
  int completions = 0;
  auto count = [&completions](absl::Status s) {
    EXPECT_OK(s);
    ++completions;
  };
  uint64_t accepted = 0;
  absl::Status status;
  while (accepted <= limit) {
    status = write->Post(accepted + 1, count);
    if (!status.ok()) break;
    ++accepted;
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("rank 1")));
  EXPECT_EQ(accepted, limit);
  // An inline write puts nothing in flight: the limit does not refuse it
  // (a binding of its own, flagged in its own word).
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<BoundFlaggedWrite> other,
                       f.ab_->BindFlaggedWrite({&local, 0, 8}, {&d, 0, 8}, {&d, 16, 8}));
  ASSERT_OK_AND_ASSIGN(const bool done_now, other->TryPostInline(77));
  if (done_now) {
    EXPECT_EQ(LoadSharedWord(remote.data() + 16), 77u) << "an inline write's flag is not there";
  }
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    return completions == static_cast<int>(accepted) &&
           LoadSharedWord(remote.data() + 8) == accepted;
  }));
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK(f.a_->Progress().status());
    ASSERT_OK(f.b_->Progress().status());
  }
  EXPECT_EQ(completions, static_cast<int>(accepted)) << "an inline write's completion fired";
  EXPECT_EQ(LoadSharedWord(remote.data() + 8), accepted) << "a refused post's flag landed";
  // Room again once the completions fired.
  ASSERT_OK(FlaggedWrite(
      f, [&](Completion done) { return write->Post(accepted + 1, std::move(done)); },
      remote.data() + 8, accepted + 1, [] {}));
}

TEST_P(TransportConformanceTest, CloseCancelsPendingAndRefusesNewOperations) {
  RDMAFLOW_CONFORMANCE_SETUP(f);
  constexpr int kOps = 16;
  constexpr size_t kBytes = 256 << 10;
  ASSERT_OK_AND_ASSIGN(MemoryRegion local, f.Allocate(*f.a_, kBytes));
  ASSERT_OK_AND_ASSIGN(MemoryRegion remote, f.Allocate(*f.b_, kBytes));
  std::vector<int> calls(kOps, 0);
  std::vector<absl::Status> statuses(kOps);
  for (int i = 0; i < kOps; ++i) {
    ASSERT_OK(f.ab_->PostWrite(WholeRegion(local),
                               WholeRegion(remote.descriptor()), std::nullopt,
                               [&, i](absl::Status s) {
                                 ++calls[i];
                                 statuses[i] = std::move(s);
                               }));
  }
  ASSERT_OK(f.ab_->Close());
  ASSERT_OK(f.ab_->Close());  // Idempotent.
  ASSERT_OK(Drive({f.a_.get(), f.b_.get()}, [&] {
    for (int c : calls) {
      if (c == 0) return false;
    }
    return true;
  }));
  for (int i = 0; i < kOps; ++i) {
    EXPECT_EQ(calls[i], 1);
    EXPECT_THAT(statuses[i], AnyOf(IsOk(), StatusIs(absl::StatusCode::kCancelled)));
  }
  EXPECT_THAT(f.ab_->PostWrite(WholeRegion(local),
                               WholeRegion(remote.descriptor()), std::nullopt,
                               [](absl::Status) {
                                 ADD_FAILURE() << "posted on a closed endpoint";
                               }),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// --- A peer that dies -------------------------------------------------------

// Child side: rank 1 publishes its address and a region on `fd`, then serves
// (progresses) until killed.
int RunChild(const ConformanceBackend& backend, int fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  absl::StatusOr<std::unique_ptr<Transport>> transport =
      backend.new_group()(1);
  if (!transport.ok()) {
    std::fprintf(stderr, "conformance child: %s\n",
                 transport.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<MemoryRegion> region = (*transport)->Allocate(1 << 20);
  if (!region.ok()) return 3;
  auto send = [fd](const std::string& bytes) {
    const uint64_t size = bytes.size();
    return write(fd, &size, 8) == 8 &&
           write(fd, bytes.data(), bytes.size()) ==
               static_cast<ssize_t>(bytes.size());
  };
  if (!send((*transport)->address()) ||
      !send(region->descriptor().Serialize())) {
    return 4;
  }
  close(fd);
  while (true) {
    if (!(*transport)->Progress().ok()) return 5;
  }
}

bool ReceiveBytes(int fd, std::string* out) {
  uint64_t size = 0;
  if (read(fd, &size, 8) != 8 || size > (1 << 20)) return false;
  out->resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, out->data() + got, size - got);
    if (n <= 0) return false;
    got += n;
  }
  return true;
}

// Rank 1 of the dying-peer tests: a child process where the backend is
// multi-process, else a transport of this process. Holds a 1 MiB region
// (`target`) that rank 0 may write.
struct MortalPeer {
  pid_t child = -1;
  std::unique_ptr<Transport> transport;  // in-process only
  std::unique_ptr<Endpoint> back;        // connect_both_ways
  std::optional<MemoryRegion> region;    // in-process only
  PeerInfo info;
  RemoteRegion target;

  MortalPeer() = default;
  MortalPeer(const MortalPeer&) = delete;
  MortalPeer& operator=(const MortalPeer&) = delete;
  ~MortalPeer() {
    if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
  }

  absl::Status Start(const ConformanceBackend& backend, RankFactory& factory,
                     const Transport& rank0) {
    if (!backend.multi_process) {
      ASSIGN_OR_RETURN(transport, factory(1));
      ASSIGN_OR_RETURN(region, AllocateFor(backend, *transport, 1 << 20));
      info = PeerInfo{1, transport->address()};
      target = region->descriptor();
      if (backend.connect_both_ways) {
        ASSIGN_OR_RETURN(back, transport->Connect(PeerInfo{0, rank0.address()}));
      }
      return absl::OkStatus();
    }
    int fds[2];
    if (pipe(fds) != 0) return absl::InternalError("pipe failed");
    child = fork();
    if (child < 0) {
      close(fds[0]);
      close(fds[1]);
      return absl::InternalError("fork failed");
    }
    if (child == 0) {
      close(fds[0]);
      setenv(kChildEnv, backend.name.c_str(), 1);
      setenv(kChildFdEnv, absl::StrCat(fds[1]).c_str(), 1);
      execl("/proc/self/exe", "conformance_child", nullptr);
      _exit(127);
    }
    close(fds[1]);
    std::string address, descriptor;
    const bool received =
        ReceiveBytes(fds[0], &address) && ReceiveBytes(fds[0], &descriptor);
    close(fds[0]);
    if (!received) {
      return absl::InternalError(
          "the child process did not publish its address and region");
    }
    info = PeerInfo{1, address};
    ASSIGN_OR_RETURN(target, RemoteRegion::Parse(descriptor));
    return absl::OkStatus();
  }

  // SIGKILL and reap the process; destroy an in-process peer.
  absl::Status Kill() {
    if (child > 0) {
      if (kill(child, SIGKILL) != 0) return absl::InternalError("kill failed");
      if (waitpid(child, nullptr, 0) != child) {
        return absl::InternalError("waitpid failed");
      }
      child = -1;  // reaped
      return absl::OkStatus();
    }
    region.reset();
    back.reset();
    transport.reset();
    return absl::OkStatus();
  }
};

// Rank 0 (a transport, a 4 KiB region, an endpoint to rank 1) and rank 1,
// torn down in that order, last member first.
struct DyingPair {
  RankFactory factory;
  std::unique_ptr<Transport> a;
  std::optional<MemoryRegion> local;
  MortalPeer b;
  std::unique_ptr<Endpoint> ab;

  // Rank 0's transport: kUnavailable (the test skips) where the backend
  // cannot start here.
  static absl::StatusOr<std::unique_ptr<DyingPair>> Create(const ConformanceBackend& backend) {
    auto pair = std::make_unique<DyingPair>();
    pair->factory = backend.new_group();
    ASSIGN_OR_RETURN(pair->a, pair->factory(0));
    return pair;
  }
  // The rest: rank 0's region, rank 1, and the endpoint to it.
  absl::Status Start(const ConformanceBackend& backend) {
    ASSIGN_OR_RETURN(local, AllocateFor(backend, *a, 4096));
    RETURN_IF_ERROR(b.Start(backend, factory, *a));
    ASSIGN_OR_RETURN(ab, a->Connect(b.info));
    return absl::OkStatus();
  }
};

TEST_P(TransportConformanceTest, DeadPeerTurnsOperationsIntoErrors) {
  absl::StatusOr<std::unique_ptr<DyingPair>> made = DyingPair::Create(GetParam());
  if (absl::IsUnavailable(made.status())) GTEST_SKIP() << made.status().message();
  ASSERT_OK(made.status());
  DyingPair& pair = **made;
  ASSERT_OK(pair.Start(GetParam()));
  Transport* a = pair.a.get();
  MemoryRegion& local = *pair.local;
  MortalPeer& b = pair.b;
  Endpoint* ab = pair.ab.get();
  const RemoteRegion& target = b.target;

  // Alive: a write and a flush succeed.
  auto run = [&](bool with_flush) -> absl::Status {
    CallbackProbe write, flush;
    absl::Status posted = ab->PostWrite({&local, 0, 4096}, {&target, 0, 4096},
                                        1u, write.Callback());
    if (!posted.ok()) return posted;
    if (with_flush) {
      posted = ab->PostFlush(flush.Callback());
      if (!posted.ok()) flush.calls = 1;
    }
    absl::Status driven = Drive({a}, [&] {
      if (b.transport) b.transport->Progress().IgnoreError();
      return write.calls > 0 && (!with_flush || flush.calls > 0);
    });
    if (!driven.ok()) return driven;
    if (!write.status.ok()) return write.status;
    if (!posted.ok()) return posted;
    return flush.status;
  };
  ASSERT_OK(run(true));
  // A flagged write bound while the peer lives, where the backend has them.
  std::unique_ptr<BoundFlaggedWrite> bound;
  if (a->capabilities().flag_writes) {
    ASSERT_OK_AND_ASSIGN(bound, ab->BindFlaggedWrite({&local, 0, 8}, {&target, 0, 8},
                                                     {&target, 8, 8}));
  }

  // Operations still pending when the peer dies: posted, never progressed.
  constexpr int kPending = 8;
  std::vector<CallbackProbe> pending(kPending);
  for (CallbackProbe& probe : pending) {
    ASSERT_OK(ab->PostWrite({&local, 0, 4096}, {&target, 0, 4096}, 2u,
                            probe.Callback()));
  }

  // Kill the peer: SIGKILL for a process, destruction for an in-process one.
  ASSERT_OK(b.Kill());

  // Each pending operation ends exactly once: done before the death, or
  // failed naming the peer; never left hanging.
  ASSERT_OK(Drive({a}, [&] {
    for (const CallbackProbe& probe : pending) {
      if (probe.calls == 0) return false;
    }
    return true;
  }));
  for (const CallbackProbe& probe : pending) {
    EXPECT_EQ(probe.calls, 1);
    EXPECT_THAT(probe.status,
                AnyOf(IsOk(), StatusIs(absl::StatusCode::kUnavailable,
                                       HasSubstr("rank 1"))));
  }

  // Within a bounded time, operations fail with an error naming the peer.
  const absl::Time deadline = absl::Now() + kTimeout;
  absl::Status failure;
  while (failure.ok() && absl::Now() < deadline) failure = run(true);
  EXPECT_THAT(failure, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("rank 1")));
  // And new operations keep failing, without hanging.
  EXPECT_THAT(run(false), StatusIs(absl::StatusCode::kUnavailable,
                                   HasSubstr("rank 1")));
  if (bound != nullptr) {
    // Bound before the death: refused inline, or not inline and refused by
    // its post.
    const absl::StatusOr<bool> done_now = bound->TryPostInline(5);
    if (done_now.ok()) {
      EXPECT_FALSE(*done_now) << "an inline write went to a dead peer";
      CallbackProbe probe;
      EXPECT_THAT(bound->Post(5, probe.Callback()),
                  StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
    } else {
      EXPECT_THAT(done_now.status(),
                  StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
    }
  }
}

// A peer that dies before rank 0 first touches its region: the first use
// (Prepare, then a post) is an error naming the peer, never a crash. UCX
// 1.13 unpacking the key of a dead same-host peer's shared memory faults
// inside UCX (docs/rdma.md), so the UCX backend must not get that far.
TEST_P(TransportConformanceTest, RegionOfAPeerDeadBeforeItsFirstUseIsAnError) {
  absl::StatusOr<std::unique_ptr<DyingPair>> made = DyingPair::Create(GetParam());
  if (absl::IsUnavailable(made.status())) GTEST_SKIP() << made.status().message();
  ASSERT_OK(made.status());
  DyingPair& pair = **made;
  ASSERT_OK(pair.Start(GetParam()));
  ASSERT_OK(pair.b.Kill());

  // Prepare may not know yet (a backend that needs nothing says OK).
  EXPECT_THAT(pair.ab->Prepare(pair.b.target),
              AnyOf(IsOk(), StatusIs(absl::StatusCode::kUnavailable,
                                     HasSubstr("rank 1"))));
  // A write is refused, or fails, naming the peer, within the bound.
  const absl::Time deadline = absl::Now() + kTimeout;
  absl::Status failure;
  while (failure.ok() && absl::Now() < deadline) {
    CallbackProbe write;
    failure = pair.ab->PostWrite({&*pair.local, 0, 4096}, {&pair.b.target, 0, 4096},
                                 std::nullopt, write.Callback());
    if (!failure.ok()) break;
    failure = Drive({pair.a.get()}, [&] { return write.calls > 0; });
    if (failure.ok()) failure = write.status;
  }
  EXPECT_THAT(failure, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("rank 1")));
}

}  // namespace

std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackend>& info) {
  return info.param.name;
}

int RunConformanceMain(int argc, char** argv,
                       const std::vector<ConformanceBackend>& backends) {
  if (const char* child = std::getenv(kChildEnv)) {
    int fd = -1;
    const char* fd_text = std::getenv(kChildFdEnv);
    if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &fd)) return 126;
    for (const ConformanceBackend& backend : backends) {
      if (backend.name == child) return RunChild(backend, fd);
    }
    return 126;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace rdmaflow::rdma::testing
