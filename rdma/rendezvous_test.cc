#include "rdma/rendezvous.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/blocking.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/in_memory_store.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RendezvousTest, RanksConnectAndMoveDataThroughPublishedRegions) {
  testing::InMemoryStore store;
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto a, loopback::LoopbackTransport::Create({0, fabric}));
  ASSERT_OK_AND_ASSIGN(auto b, loopback::LoopbackTransport::Create({1, fabric}));
  ASSERT_OK(PublishAddress(store, "job", *a));
  ASSERT_OK(PublishAddress(store, "job", *b));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  ASSERT_OK(PublishRegion(store, "job", "grad/1", target.descriptor()));

  ASSERT_OK_AND_ASSIGN(auto endpoint,
                       ConnectToPeer(*a, store, "job", 1, absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(RemoteRegion remote,
                       FetchRegion(store, "job", "grad/1", absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(64));
  std::memset(source.data(), 0x7A, 64);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_OK(Write(*a, *endpoint, WholeRegion(source), WholeRegion(remote), 9u,
                  deadline));
  ASSERT_OK_AND_ASSIGN(Notification n, WaitNotification(*b, deadline));
  EXPECT_EQ(n.peer_rank, 0);
  EXPECT_EQ(n.value, 9u);
  EXPECT_EQ(target.data()[63], std::byte{0x7A});
}

TEST(RendezvousTest, MissingPeerTimesOutWithAHint) {
  testing::InMemoryStore store;
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto a, loopback::LoopbackTransport::Create({0, fabric}));
  EXPECT_THAT(ConnectToPeer(*a, store, "job", 3, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("is rank 3 running")));
}

// An address in the store is only used when it was published with this
// job's token, for the rank and namespace it is found under.
TEST(RendezvousTest, AddressesOfAnotherJobOrForgedOnesAreRefused) {
  testing::InMemoryStore store;
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto a, loopback::LoopbackTransport::Create({0, fabric}));
  ASSERT_OK_AND_ASSIGN(auto b, loopback::LoopbackTransport::Create({1, fabric}));
  setenv("RDMAFLOW_JOB_TOKEN", "other-job", 1);
  ASSERT_OK(PublishAddress(store, "job", *b));
  setenv("RDMAFLOW_JOB_TOKEN", "our-job", 1);
  EXPECT_THAT(ConnectToPeer(*a, store, "job", 1, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not published with this job's token")));
  ASSERT_OK(PublishAddress(store, "job", *b));
  EXPECT_OK(ConnectToPeer(*a, store, "job", 1, absl::Seconds(1)).status());

  // A valid record copied under another rank's key, or another namespace's.
  ASSERT_OK_AND_ASSIGN(std::string record, store.Get("job/address/1", absl::Seconds(1)));
  ASSERT_OK(store.Set("job/address/2", record));
  EXPECT_THAT(ConnectToPeer(*a, store, "job", 2, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
  ASSERT_OK(store.Set("other/address/1", record));
  EXPECT_THAT(ConnectToPeer(*a, store, "other", 1, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Garbage, and a bare address as earlier versions published it.
  for (const std::string& bytes : {std::string("junk"), std::string(), b->address(),
                                  std::string(100000, '\xff')}) {
    ASSERT_OK(store.Set("job/address/3", bytes));
    absl::Status status = ConnectToPeer(*a, store, "job", 3, absl::Seconds(1)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status))
        << status;
  }
  unsetenv("RDMAFLOW_JOB_TOKEN");
}

TEST(RendezvousTest, MalformedPublishedDescriptorIsInvalidArgument) {
  testing::InMemoryStore store;
  ASSERT_OK(store.Set("job/bad", "junk"));
  EXPECT_THAT(FetchRegion(store, "job", "bad", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A region descriptor in the store is used only when it was published with
// this job's token under the key it is found at: a store writer cannot
// point a rank at memory of its choosing (ucp_ep_rkey_unpack, ucp_rkey_ptr
// and plain loads for same-host peers all trust the descriptor).
TEST(RendezvousTest, RegionsOfAnotherJobOrForgedOnesAreRefused) {
  testing::InMemoryStore store;
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto b, loopback::LoopbackTransport::Create({1, fabric}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  setenv("RDMAFLOW_JOB_TOKEN", "other-job", 1);
  ASSERT_OK(PublishRegion(store, "job", "grad/1", target.descriptor()));
  setenv("RDMAFLOW_JOB_TOKEN", "our-job", 1);
  EXPECT_THAT(FetchRegion(store, "job", "grad/1", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not published with this job's token")));
  ASSERT_OK(PublishRegion(store, "job", "grad/1", target.descriptor()));
  ASSERT_OK_AND_ASSIGN(RemoteRegion fetched,
                       FetchRegion(store, "job", "grad/1", absl::Seconds(1)));
  EXPECT_EQ(fetched.Serialize(), target.descriptor().Serialize());

  // A valid record copied under another key, or another namespace.
  ASSERT_OK_AND_ASSIGN(std::string record, store.Get("job/grad/1", absl::Seconds(1)));
  ASSERT_OK(store.Set("job/grad/2", record));
  EXPECT_THAT(FetchRegion(store, "job", "grad/2", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ASSERT_OK(store.Set("job/grad/1/x", record));
  EXPECT_THAT(FetchRegion(store, "job/grad", "1/x", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // The descriptor as earlier versions published it (no proof), and one
  // whose region was changed after it was proven (the address moved).
  ASSERT_OK(store.Set("job/grad/3", target.descriptor().Serialize()));
  EXPECT_FALSE(FetchRegion(store, "job", "grad/3", absl::Seconds(1)).ok());
  std::string moved = record;
  const std::string serialized = target.descriptor().Serialize();
  const size_t at = moved.find(serialized);
  ASSERT_NE(at, std::string::npos);
  moved[at + serialized.size() - 1] ^= 1;
  ASSERT_OK(store.Set("job/grad/1", moved));
  EXPECT_FALSE(FetchRegion(store, "job", "grad/1", absl::Seconds(1)).ok());
  unsetenv("RDMAFLOW_JOB_TOKEN");
}

TEST(RendezvousTest, BarrierReleasesAllRanksAndReportsStragglers) {
  testing::InMemoryStore store;
  std::thread other([&] {
    EXPECT_OK(Barrier(store, "job", "start", 2, absl::Seconds(30)));
  });
  EXPECT_OK(Barrier(store, "job", "start", 2, absl::Seconds(30)));
  other.join();
  EXPECT_THAT(Barrier(store, "job", "lonely", 3, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 3 ranks arrived")));
}

// The last rank to arrive returns without asking the store again: the
// store's host may already be gone once the others saw the mark (a store
// whose waits fail stands for it).
TEST(RendezvousTest, TheLastToArriveDoesNotWait) {
  // Sets and adds reach the store; a wait or get finds its host gone.
  class GoneAfterTheMark final : public Store {
   public:
    absl::Status Set(absl::string_view key, absl::string_view value) override {
      return kept.Set(key, value);
    }
    absl::StatusOr<std::string> Get(absl::string_view, absl::Duration) override {
      return absl::UnavailableError("the store's host left");
    }
    absl::Status Wait(const std::vector<std::string>&, absl::Duration) override {
      return absl::UnavailableError("the store's host left");
    }
    absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
      return kept.Add(key, delta);
    }
    testing::InMemoryStore kept;
  };
  GoneAfterTheMark store;
  ASSERT_OK(store.Add("job/barrier/end/count", 2).status());  // two arrived before
  EXPECT_OK(Barrier(store, "job", "end", 3, absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(std::string done, store.kept.Get("job/barrier/end/done", absl::Seconds(1)));
  EXPECT_EQ(done, "1");
  // One that is not last does wait, and says so when it cannot.
  EXPECT_THAT(Barrier(store, "job", "start", 2, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(RendezvousTest, ABarrierWithATransportKeepsItProgressing) {
  // Rank 0's write completes (its callback fires) only in its Progress();
  // waiting at a progressing barrier is enough for it to.
  testing::InMemoryStore store;
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto a, loopback::LoopbackTransport::Create({0, fabric}));
  ASSERT_OK_AND_ASSIGN(auto b, loopback::LoopbackTransport::Create({1, fabric}));
  ASSERT_OK(PublishAddress(store, "job", *b));
  ASSERT_OK_AND_ASSIGN(MemoryRegion target, b->Allocate(64));
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, a->Allocate(64));
  ASSERT_OK_AND_ASSIGN(auto endpoint,
                       ConnectToPeer(*a, store, "job", 1, absl::Seconds(5)));
  bool done = false;
  ASSERT_OK(endpoint->PostWrite(WholeRegion(source), WholeRegion(target.descriptor()),
                                std::nullopt, [&](absl::Status s) {
                                  EXPECT_OK(s);
                                  done = true;
                                }));
  // The other rank arrives second, once this one is in: the last to arrive
  // returns at once without progressing (it has nothing to wait for), so
  // only the first one's wait proves anything.
  std::thread other([&] {
    EXPECT_OK(store.Wait({"job/barrier/end/count"}, absl::Seconds(30)));
    EXPECT_OK(Barrier(store, "job", "end", 2, absl::Seconds(30)));
  });
  auto progress = [&](absl::Time until) {
    return ProgressUntil(*a, [&] { return absl::Now() >= until; }, until + absl::Seconds(30),
                         "the barrier");
  };
  EXPECT_OK(Barrier(store, "job", "end", 2, absl::Seconds(30), progress));
  other.join();
  EXPECT_TRUE(done);
  // Both counted themselves out, the one without a transport too.
  EXPECT_THAT(store.Add("job/barrier/end/left", 0), IsOkAndHolds(2));
  EXPECT_THAT(Barrier(store, "job", "alone", 2, absl::Milliseconds(20), progress),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 2 ranks arrived")));
}

// A polling barrier's rank may host the store and leave once the barrier
// passed; it must not leave before every rank saw it pass. Here the store
// fails every call once rank 0 returned, and rank 1, which arrived first
// and reads the count, reads it next only once rank 0 waits for the others
// to count out, or has left: it passes only if rank 0 waited for it.
TEST(RendezvousTest, TheStoresHostLeavesOnlyAfterEveryRankSawThePass) {
  class LeavesWithItsHost final : public Store {
   public:
    absl::Status Set(absl::string_view key, absl::string_view value) override {
      RETURN_IF_ERROR(Here());
      return kept.Set(key, value);
    }
    absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
      RETURN_IF_ERROR(Here());
      return kept.Get(key, timeout);
    }
    absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
      RETURN_IF_ERROR(Here());
      return kept.Wait(keys, timeout);
    }
    absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
      RETURN_IF_ERROR(Here());
      absl::StatusOr<int64_t> value = kept.Add(key, delta);
      // A read of the count out: only a rank that waits for the others does.
      if (absl::EndsWith(key, "/left") && delta == 0 && !out_or_gone.HasBeenNotified()) {
        out_or_gone.Notify();
      }
      return value;
    }
    void Leave() {
      gone = true;
      if (!out_or_gone.HasBeenNotified()) out_or_gone.Notify();
    }
    absl::Status Here() const {
      return gone ? absl::UnavailableError("the store's host left") : absl::OkStatus();
    }
    testing::InMemoryStore kept;
    std::atomic<bool> gone{false};
    absl::Notification out_or_gone;
  };
  LeavesWithItsHost store;
  std::thread reader([&] {
    auto progress = [&](absl::Time until) {
      store.out_or_gone.WaitForNotificationWithDeadline(until + absl::Seconds(30));
      return absl::OkStatus();
    };
    EXPECT_OK(Barrier(store, "job", "end", 2, absl::Seconds(30), progress));
  });
  ASSERT_OK(store.kept.Wait({"job/barrier/end/count"}, absl::Seconds(30)));
  EXPECT_OK(Barrier(store, "job", "end", 2, absl::Seconds(30),
                    [](absl::Time) { return absl::OkStatus(); }));
  store.Leave();
  reader.join();
  EXPECT_THAT(store.kept.Add("job/barrier/end/left", 0), IsOkAndHolds(2));
}

// Counting out cannot fail a barrier that passed: a rank that died after
// arriving leaves the others waiting for it only until the deadline.
TEST(RendezvousTest, ARankThatDiedAfterArrivingDoesNotFailThePassedBarrier) {
  testing::InMemoryStore store;
  ASSERT_OK(store.Add("job/barrier/end/count", 1).status());  // arrived, then died
  EXPECT_OK(Barrier(store, "job", "end", 2, absl::Milliseconds(50),
                    [](absl::Time) { return absl::OkStatus(); }));
  EXPECT_THAT(store.Add("job/barrier/end/left", 0), IsOkAndHolds(1));
}

TEST(BlockingTest, WaitNotificationTimesOutNamingTheRank) {
  auto fabric = loopback::LoopbackFabric::Create();
  ASSERT_OK_AND_ASSIGN(auto a, loopback::LoopbackTransport::Create({4, fabric}));
  EXPECT_THAT(WaitNotification(*a, absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("rank 4")));
}

}  // namespace
}  // namespace rdmaflow::rdma
