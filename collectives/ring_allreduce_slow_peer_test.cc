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

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::FaultyTransport;
using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::rdma::testing::TrackingTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
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
  // messages needed rank 2's.
  EXPECT_THAT(fast[0].call,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("all-reduce 'allreduce' on rank 0"),
                             HasSubstr("waiting for message"), HasSubstr("from rank 2"))));
  EXPECT_THAT(fast[1].call,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("on rank 1"), HasSubstr("from rank 0"))));
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

}  // namespace
}  // namespace rdmaflow::collectives
