// A Messenger and a ring all-reduce on one set of links (as in the c10d
// engine): they share each peer's endpoint and watch; a peer that dies ends
// the ring's call with kUnavailable, not at its timeout; and the Messenger,
// idle, does not hold back the shared watch's probes that another
// protocol waiting on the peer needs.
#include <memory>
#include <string>
#include <vector>

#include "collectives/ring_allreduce.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "onesided/messenger.h"
#include "onesided/progress/waits.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;

constexpr char kNs[] = "shared_links";

TEST(SharedLinksTest, ADeadPeerEndsTheRingsWaitThroughTheSharedWatch) {
  std::vector<onesided::PeerLinksStats> stats(2);
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& transport,
             rdma::Store& store) -> absl::Status {
        absl::Status ended;
        {
          onesided::ProgressLoopOptions loop_options;
          loop_options.liveness_interval = absl::Milliseconds(20);
          onesided::ProgressLoop loop(*transport, loop_options);
          onesided::PeerLinksOptions links_options;
          links_options.timeout = absl::Seconds(60);
          ASSIGN_OR_RETURN(auto links, onesided::PeerLinks::Create(*transport, store, kNs,
                                                                   loop, links_options));
          onesided::MessengerOptions messenger_options;
          messenger_options.loop = &loop;
          ASSIGN_OR_RETURN(auto messenger,
                           onesided::Messenger::Create(*links, 2, messenger_options));
          RingAllReduceOptions ring_options;
          ring_options.capacity_bytes = 4096;
          ring_options.chunk_bytes = 1024;
          ring_options.loop = &loop;
          // Far longer than the liveness interval: a call that ends by the
          // timeout says kDeadlineExceeded.
          ring_options.timeout = absl::Seconds(30);
          ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(*links, {0, 1}, ring_options));
          stats[rank] = links->stats();
          RETURN_IF_ERROR(onesided::Barrier(loop, store, kNs, "ready", 2, absl::Seconds(60)));
          if (rank == 0) ended = ring->AllReduce(0, 16, DataType::kFloat32);
        }
        if (rank == 1) transport.reset();  // dies, having never called
        return ended;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(results[1], IsOk());
  for (int rank = 0; rank < 2; ++rank) {
    // The ring's data and control lanes; the Messenger shares the data one.
    EXPECT_EQ(stats[rank].endpoints, 2) << "rank " << rank;
    EXPECT_EQ(stats[rank].watches, 1) << "rank " << rank;
  }
}

// The Messenger runs its round on every poll of the loop. An idle Messenger
// must leave the shared watch's schedule alone: a protocol that waits on a
// dead peer (here a bare wait that probes it, as the ring's and the host
// all-reduce's waits do) hears of it by a failed probe, not at its deadline.
TEST(SharedLinksTest, AnIdleMessengerDoesNotHoldBackAnotherProtocolsProbes) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& transport,
             rdma::Store& store) -> absl::Status {
        absl::Status heard;
        {
          onesided::ProgressLoopOptions loop_options;
          loop_options.liveness_interval = absl::Milliseconds(20);
          onesided::ProgressLoop loop(*transport, loop_options);
          ASSIGN_OR_RETURN(auto links,
                           onesided::PeerLinks::Create(*transport, store, "idle", loop, {}));
          onesided::MessengerOptions messenger_options;
          messenger_options.loop = &loop;
          ASSIGN_OR_RETURN(auto messenger,
                           onesided::Messenger::Create(*links, 2, messenger_options));
          ASSIGN_OR_RETURN(int64_t watch,
                           links->Subscribe(1 - rank, [&](int, const absl::Status& status) {
                             if (heard.ok()) heard = status;
                           }));
          RETURN_IF_ERROR(onesided::Barrier(loop, store, "idle", "ready", 2, absl::Seconds(60)));
          if (rank == 1) {
            links->Unsubscribe(watch);
          } else {
            RETURN_IF_ERROR(rdma::Barrier(store, "idle", "gone", 2, absl::Seconds(60)));
            const int peer[] = {1};
            absl::Status waited =
                loop.WaitUntil([&] { return !heard.ok(); }, absl::Now() + absl::Seconds(20),
                               [] { return std::string("a probe of rank 1 to fail"); }, peer);
            RETURN_IF_ERROR(waited);
            links->Unsubscribe(watch);
          }
        }
        if (rank == 1) {
          transport.reset();  // dies
          RETURN_IF_ERROR(rdma::Barrier(store, "idle", "gone", 2, absl::Seconds(60)));
        }
        return heard;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(results[1], IsOk());
}

}  // namespace
}  // namespace rdmaflow::collectives
