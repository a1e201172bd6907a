// The ring all-reduce with a member slower than the timeout: ranks 0 and 1
// of a 3-member ring call, rank 2 calls only after both have given up and
// destroyed their rings. Rank 1's writes towards rank 2 never complete
// (FaultyTransport kDrop, and a TrackingTransport that holds their
// completions even past Close). The waiting ranks get kDeadlineExceeded
// naming the neighbour and the message they waited for; the ring is then
// unusable and Shutdown returns within its bound; nothing they posted is
// freed while in flight; and the slow rank's late writes into rank 0's
// regions still find them registered (on loopback a write into a freed
// region is kPermissionDenied; on a NIC it would land in reused memory).
// And a neighbour that stalls with an all-gather piece posted writes it,
// after the give-up, into staging rather than into a protected region.
#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/ring_allreduce.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/rank_threads.h"
#include "rdma/testing/tracking_transport.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::FaultyTransport;
using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::rdma::testing::TrackingTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "ring_slow_peer_test";
constexpr size_t kCount = 1000;

RingAllReduceOptions Options() {
  RingAllReduceOptions options;
  options.capacity_bytes = kCount * 4;
  options.chunk_bytes = 256;
  options.slots = 4;
  options.timeout = absl::Seconds(1);
  return options;
}

struct Fast {
  absl::Status call;
  absl::Status again;
  absl::Status shutdown;
  std::vector<std::string> violations;
};

TEST(RingAllReduceSlowPeerTest, TheWaitingRanksGiveUpAndTheLateRankWritesIntoLiveMemory) {
  Fast fast[2];
  absl::Status slow_call, slow_shutdown;
  const std::string gone = absl::StrCat(kNs, "/gone");
  const std::string all_gone = absl::StrCat(kNs, "/all_gone");
  const std::string slow_done = absl::StrCat(kNs, "/slow_done");
  std::vector<absl::Status> results = RunRankThreads(
      3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 2) {
          ASSIGN_OR_RETURN(auto ring,
                           RingAllReduce::Create(transport, store, kNs, {0, 1, 2}, Options()));
          // Slower than the others' timeout: it calls once they are gone.
          RETURN_IF_ERROR(store.Wait({all_gone}, absl::Seconds(30)));
          slow_call = ring->AllReduce(0, kCount, DataType::kFloat32);
          slow_shutdown = ring->Shutdown(absl::Milliseconds(200));
          ring.reset();
          return store.Set(slow_done, "1");
        }
        // Rank 1's writes to rank 2 never complete, even once cancelled.
        FaultyTransport faulty(transport);
        FaultyTransport::Fault drop;
        drop.op = FaultyTransport::Op::kWrite;
        drop.peer = 2;
        drop.count = -1;
        drop.action = FaultyTransport::Action::kDrop;
        if (rank == 1) faulty.AddFault(drop);
        TrackingTransport tracking(faulty);
        if (rank == 1) tracking.hold_writes();
        Fast& mine = fast[rank];
        {
          ASSIGN_OR_RETURN(auto ring,
                           RingAllReduce::Create(tracking, store, kNs, {0, 1, 2}, Options()));
          mine.call = ring->AllReduce(0, kCount, DataType::kFloat32);
          mine.again = ring->AllReduce(0, kCount, DataType::kFloat32);
          mine.shutdown = ring->Shutdown(absl::Milliseconds(200));
        }  // destroyed: its memory must stay registered for rank 2's writes
        // Late completions of what rank 1 posted fire now.
        tracking.Release();
        for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(tracking.Progress().status());
        mine.violations = tracking.violations();
        ASSIGN_OR_RETURN(int64_t left, store.Add(gone, 1));
        if (left == 2) RETURN_IF_ERROR(store.Set(all_gone, "1"));
        // The transport (and the regions left registered) stays up.
        return store.Wait({slow_done}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);

  // Rank 0 waited for its left neighbour, rank 2; rank 1 for rank 0, whose
  // messages needed rank 2's, or for rank 2's call descriptor (rank 1 sends
  // rank 2 nothing it could take as all-gather before it).
  EXPECT_THAT(fast[0].call,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("all-reduce 'allreduce' on rank 0"),
                             HasSubstr("waiting for message"), HasSubstr("from rank 2"))));
  EXPECT_THAT(fast[1].call,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("on rank 1"),
                             AnyOf(HasSubstr("from rank 0"),
                                   HasSubstr("the descriptor of call 0 from rank 2")))));
  for (const Fast& f : fast) {
    EXPECT_THAT(f.again, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
    EXPECT_FALSE(f.shutdown.ok());  // rank 2 never came to the barrier
    EXPECT_THAT(f.violations, ::testing::IsEmpty());
  }
  // The slow rank's writes into rank 0 landed in registered memory: it
  // timed out waiting for rank 1, which had stopped.
  EXPECT_THAT(slow_call, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("from rank 1")));
  EXPECT_FALSE(slow_shutdown.ok());
}

// Runs a hook before every Progress(): a rank that stalls there stops
// before the operations it has posted are carried out (loopback executes
// them in the poster's Progress()).
class StallingTransport final : public rdma::testing::TransportWrapper {
 public:
  StallingTransport(rdma::Transport& inner, std::function<void()> before)
      : TransportWrapper(inner), before_(std::move(before)) {}
  absl::StatusOr<int> Progress() override {
    before_();
    return TransportWrapper::Progress();
  }

 private:
  std::function<void()> before_;
};

// Rank 2 stalls with its first all-gather piece to rank 0 posted (credited,
// not yet written) until rank 0 has given up; then the write goes out. With
// gather_in_slots_from covering the region, it lands in rank 0's staging
// slots: rank 0's data region holds after the stall what it held when the
// call failed. (Without it, the piece lands in the data region: the
// c10d backend's registered tensors.)
TEST(RingAllReduceSlowPeerTest, AStalledNeighbourNeverWritesIntoAProtectedRegionAfterTheGiveUp) {
  RingAllReduceOptions options = Options();
  options.gather_in_slots_from = 0;
  const std::string gave_up = absl::StrCat(kNs, "/protected/gave_up");
  const std::string slow_done = absl::StrCat(kNs, "/protected/slow_done");
  absl::Status calls[3];
  std::vector<float> at_give_up, after_stall;
  std::vector<absl::Status> results = RunRankThreads(
      3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        // Rank 2 counts its payload writes to rank 0 (flags are 8 bytes;
        // no piece here is): 1000 floats are segments of 334, 333 and 333
        // in 6 pieces of at most 64, so the reduce-scatter sends 12 and
        // the 13th is the all-gather's first.
        FaultyTransport faulty(transport);
        int payloads = 0;
        bool stall = false, stalled = false;
        FaultyTransport::Fault watch;
        watch.op = FaultyTransport::Op::kWrite;
        watch.peer = 0;
        watch.count = -1;
        watch.action = FaultyTransport::Action::kCorrupt;
        watch.corrupt = [&](uint64_t, absl::Span<std::byte> bytes) {
          if (bytes.size() != 8 && ++payloads == 13) stall = true;
        };
        if (rank == 2) faulty.AddFault(watch);
        StallingTransport stalling(faulty, [&] {
          if (!stall || stalled) return;
          stalled = true;
          store.Wait({gave_up}, absl::Seconds(30)).IgnoreError();
        });
        const std::string ns = absl::StrCat(kNs, "/protected");
        ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(stalling, store, ns, {0, 1, 2}, options));
        auto* data = reinterpret_cast<float*>(ring->data());
        std::fill(data, data + kCount, static_cast<float>(rank + 1));
        calls[rank] = ring->AllReduce(0, kCount, DataType::kFloat32);
        if (rank == 0) {
          at_give_up.assign(data, data + kCount);
          RETURN_IF_ERROR(store.Set(gave_up, "1"));
          // The ring stays (its regions registered) while rank 2 writes.
          RETURN_IF_ERROR(store.Wait({slow_done}, absl::Seconds(30)));
          after_stall.assign(data, data + kCount);
          return absl::OkStatus();
        }
        if (rank == 2) {
          EXPECT_TRUE(stalled) << "rank 2 never posted its 13th piece to rank 0";
          RETURN_IF_ERROR(store.Set(slow_done, "1"));
        }
        return store.Wait({slow_done}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_THAT(calls[0], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("from rank 2")));
  EXPECT_FALSE(calls[2].ok());
  ASSERT_EQ(after_stall.size(), kCount);
  EXPECT_EQ(after_stall, at_give_up) << "rank 2's late all-gather piece landed in rank 0's data";
}

}  // namespace
}  // namespace rdmaflow::collectives
