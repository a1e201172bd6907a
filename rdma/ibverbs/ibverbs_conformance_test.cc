// The transport conformance suite on the native verbs backend, and what only
// verbs has: Close() draining flush completions before it cancels, accepted
// queue pairs freed with their peer's endpoint, the job token between real
// transports. Without an RDMA device every case skips with the reason;
// tools/rdma_tests.sh runs it inside a Soft-RoCE VM, where it must pass
// whole.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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

std::vector<ConformanceBackend> IbverbsBackends() {
  ConformanceBackend backend;
  backend.name = "ibverbs";
  backend.multi_process = true;
  backend.new_group = [] {
    return [](int rank)
               -> absl::StatusOr<std::unique_ptr<rdmaflow::rdma::Transport>> {
      return IbverbsTransport::Create(DeviceOptions(rank));
    };
  };
  return {backend};
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
  IbverbsTransportOptions mine = DeviceOptions(1);
  mine.job_token = "job-a";
  IbverbsTransportOptions theirs = DeviceOptions(0);
  theirs.job_token = "job-b";
  CREATE_PAIR_OR_SKIP(b, a, mine, theirs);
  EXPECT_THAT(a->Connect(PeerInfo{1, b->address()}),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("wrong job token")));
  EXPECT_EQ(b->stats().accepted_queue_pairs, 0u);
}

}  // namespace

RDMAFLOW_INSTANTIATE_CONFORMANCE(Ibverbs, IbverbsBackends)
