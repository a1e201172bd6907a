// ProgressEngine on links it shares with other protocols: giving up on
// operations in flight severs only the peers they went to, so the other
// peers go on serving the protocols beside it.
#include "runtime/progress_engine.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ProgressEngineTest, ClosingWithAHungOperationSeversOnlyItsPeerOnSharedLinks) {
  // Rank 0's flushes towards rank 1 never complete (a peer that stopped
  // answering); towards rank 2 all is well. Rank 0's engine posts one to
  // rank 1 and is destroyed while it hangs: the fence severs rank 1 on the
  // shared links (which cancels the flush, so no callback outlives the
  // engine), and rank 2's lane stays open for the links' other protocols.
  constexpr char kNs[] = "engine_fence";
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        rdma::testing::FaultyTransport faulty(transport);
        onesided::ProgressLoop loop(faulty, onesided::ProgressLoopOptions{});
        ASSIGN_OR_RETURN(std::unique_ptr<onesided::PeerLinks> links,
                         onesided::PeerLinks::Create(faulty, store, kNs, loop, {}));
        if (rank != 0) {
          // Stays until rank 0 is done with its links.
          return store.Wait({absl::StrCat(kNs, "/done")}, absl::Seconds(60));
        }
        rdma::testing::FaultyTransport::Fault drop;
        drop.peer = 1;
        drop.op = rdma::testing::FaultyTransport::Op::kFlush;
        drop.action = rdma::testing::FaultyTransport::Action::kDrop;
        drop.count = -1;
        faulty.AddFault(drop);
        {
          CommunicatorOptions options;
          options.ns = kNs;
          options.links = links.get();
          ProgressEngine engine(faulty, store, options, 3);
          RETURN_IF_ERROR(engine.Connect({1, 2}));
          RETURN_IF_ERROR(engine.Post(
              [&] {
                return engine.endpoint(1)->PostFlush(
                    [&engine](absl::Status) { engine.Completed(1); });
              },
              1, [] { return std::string("a flush to rank 1"); }));
          EXPECT_EQ(engine.outstanding(), 1);
        }
        EXPECT_THAT(links->PeerStatus(1),
                    StatusIs(absl::StatusCode::kUnavailable,
                             HasSubstr("the communicator of rank 0 is closing")));
        EXPECT_OK(links->PeerStatus(2));
        EXPECT_EQ(links->stats().severed, 1);
        return store.Set(absl::StrCat(kNs, "/done"), "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::runtime
