// PeerLinks: protocols sharing a job's links get one endpoint and one watch
// per peer, their regions through one typed exchange; a layout that differs,
// a peer that never comes, a dead peer and a fence that has to sever are
// each reported to whom they concern.
#include "onesided/links/peer_links.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/waits.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "links_test";

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

TEST(PeerLinksTest, ProtocolsShareOneEndpointAndOneWatchPerPeer) {
  constexpr int kRanks = 3;
  std::vector<PeerLinksStats> stats(kRanks);
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        ASSIGN_OR_RETURN(rdma::MemoryRegion a, transport.Allocate(64 * kRanks));
        ASSIGN_OR_RETURN(rdma::MemoryRegion b, transport.Allocate(64 * kRanks));
        std::memset(a.data(), 0, a.size());
        std::memset(b.data(), 0, b.size());
        std::vector<int> everyone = {0, 1, 2, rank, 0};  // self and repeats are skipped
        ASSIGN_OR_RETURN(auto first,
                         links->Exchange({"one/x", "size=1", {{"a", &a}}}, everyone, "one"));
        ASSIGN_OR_RETURN(auto second, links->Exchange({"two/x", "size=2", {{"b", &b}}},
                                                      everyone, "two"));
        RETURN_IF_ERROR(Expect(first.size() == 2 && second.size() == 2, "two peers each"));
        int64_t heard = 0;
        for (int p = 0; p < 2; ++p) {
          const int peer = first[p].rank;
          RETURN_IF_ERROR(Expect(second[p].rank == peer, "peers in the same order"));
          ASSIGN_OR_RETURN(rdma::Endpoint * one, links->Lane(peer));
          ASSIGN_OR_RETURN(rdma::Endpoint * two, links->Lane(peer));
          RETURN_IF_ERROR(Expect(one == two, "the same data lane for both protocols"));
          ASSIGN_OR_RETURN(rdma::Endpoint * control, links->Lane(peer, LaneKind::kControl));
          RETURN_IF_ERROR(Expect(control != one, "the control lane is an endpoint of its own"));
          RETURN_IF_ERROR(links->Subscribe(peer, [&](int, absl::Status) { ++heard; }).status());
          RETURN_IF_ERROR(links->Subscribe(peer, [&](int, absl::Status) { ++heard; }).status());
          // Both protocols' regions work through the one lane.
          RETURN_IF_ERROR(one->Prepare(first[p].regions[0]));
          RETURN_IF_ERROR(one->Prepare(second[p].regions[0]));
          const absl::Time deadline = absl::Now() + absl::Seconds(30);
          std::memset(a.data() + 64 * rank, rank + 1, 64);
          std::memset(b.data() + 64 * rank, rank + 11, 64);
          RETURN_IF_ERROR(Write(loop, *one, {&a, size_t(64) * rank, 64},
                                      {&first[p].regions[0], uint64_t(64) * rank, 64},
                                      std::nullopt, deadline));
          RETURN_IF_ERROR(Write(loop, *one, {&b, size_t(64) * rank, 64},
                                      {&second[p].regions[0], uint64_t(64) * rank, 64},
                                      std::nullopt, deadline));
        }
        RETURN_IF_ERROR(Barrier(loop, store, kNs, "written", kRanks, absl::Seconds(60)));
        for (int peer = 0; peer < kRanks; ++peer) {
          RETURN_IF_ERROR(Expect(a.data()[64 * peer] == std::byte(peer + 1) &&
                                     b.data()[64 * peer + 63] == std::byte(peer + 11),
                                 absl::StrCat("rank ", peer, "'s writes landed")));
        }
        RETURN_IF_ERROR(Expect(heard == 0, "no failure heard from live peers"));
        stats[rank] = links->stats();
        return Barrier(loop, store, kNs, "done", kRanks, absl::Seconds(60));
      });
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_THAT(results[rank], IsOk()) << "rank " << rank;
    EXPECT_EQ(stats[rank].endpoints, 4) << "a data and a control lane to each of 2 peers";
    EXPECT_EQ(stats[rank].watches, 2) << "one watch per peer";
    EXPECT_EQ(stats[rank].subscriptions, 4);
    EXPECT_EQ(stats[rank].severed, 0);
  }
}

TEST(PeerLinksTest, ALayoutThatDiffersQuotesBoth) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        ASSIGN_OR_RETURN(rdma::MemoryRegion a, transport.Allocate(64));
        return links
            ->Exchange({"p/x", absl::StrCat("slots=", rank + 4), {{"a", &a}}}, {1 - rank},
                       "protocol 'x'")
            .status();
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("protocol 'x'"), HasSubstr("slots=4"),
                                         HasSubstr("slots=5"), HasSubstr("rank 1"))));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(PeerLinksTest, APeerThatNeverComesIsNamedAtTheTimeout) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1) return absl::OkStatus();  // never joins
        ProgressLoop loop(transport, ProgressLoopOptions{});
        PeerLinksOptions options;
        options.timeout = absl::Milliseconds(200);
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, options));
        ASSIGN_OR_RETURN(rdma::MemoryRegion a, transport.Allocate(64));
        absl::Status exchanged =
            links->Exchange({"p/x", "same", {{"a", &a}}}, {1}, "protocol 'x'").status();
        absl::Status lane = links->Lane(1).status();
        RETURN_IF_ERROR(Expect(absl::IsDeadlineExceeded(lane) &&
                                   absl::StrContains(lane.message(), "rank 1"),
                               absl::StrCat("Lane(): ", lane.ToString())));
        return exchanged;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                   AllOf(HasSubstr("protocol 'x'"), HasSubstr("rank 1"),
                                         HasSubstr("never joined"))));
}

TEST(PeerLinksTest, ADeadPeerReachesEverySubscriberThroughOneWatch) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& transport,
             rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          RETURN_IF_ERROR(rdma::PublishAddress(store, kNs, *transport));
          RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/subscribed-0")}, absl::Seconds(60)));
          transport.reset();  // dies
          return store.Set(absl::StrCat(kNs, "/dead"), "1");
        }
        ProgressLoopOptions options;
        options.liveness_interval = absl::Milliseconds(10);
        ProgressLoop loop(*transport, options);
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(*transport, store, kNs, loop, {}));
        std::vector<absl::Status> heard(2);
        for (int s = 0; s < 2; ++s) {
          RETURN_IF_ERROR(
              links->Subscribe(1, [&heard, s](int, absl::Status st) { heard[s] = st; })
                  .status());
        }
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/subscribed-0"), "1"));
        RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/dead")}, absl::Seconds(60)));
        RETURN_IF_ERROR(loop.WaitUntil([&] { return !heard[0].ok() && !heard[1].ok(); },
                                       absl::Now() + absl::Seconds(30),
                                       [] { return "both subscribers to hear"; }, {1}));
        RETURN_IF_ERROR(Expect(links->stats().watches == 1, "one watch for two subscribers"));
        return heard[0];
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(results[1], IsOk());
}

TEST(PeerLinksTest, AFenceSeversOnlyPeersWhoseOperationsHang) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        const int peer = 1 - rank;
        ASSIGN_OR_RETURN(rdma::Endpoint * lane, links->Lane(peer));
        absl::Status heard;
        ASSIGN_OR_RETURN(int64_t id,
                         links->Subscribe(peer, [&](int, absl::Status s) { heard = s; }));
        // Done at once: nothing is severed.
        RETURN_IF_ERROR(Expect(
            links->Fence({peer}, [] { return true; }, absl::Now() + absl::Seconds(5), "test"),
            "a fence with nothing in flight"));
        RETURN_IF_ERROR(Expect(links->stats().severed == 0 && heard.ok(), "nothing severed"));
        // Never done (an operation that hangs): severed, subscribers told,
        // the lane refused from then on, and the fence still ends by its deadline.
        bool done = links->Fence({peer}, [] { return false; },
                                 absl::Now() + absl::Milliseconds(300), "giving up");
        RETURN_IF_ERROR(Expect(!done, "a fence that cannot finish says so"));
        RETURN_IF_ERROR(Expect(links->stats().severed == 1, "one peer severed"));
        RETURN_IF_ERROR(Expect(absl::IsUnavailable(heard) &&
                                   absl::StrContains(heard.message(), "giving up"),
                               heard.ToString()));
        RETURN_IF_ERROR(Expect(absl::IsUnavailable(links->Lane(peer).status()),
                               "a severed peer's lane is refused"));
        RETURN_IF_ERROR(Expect(!links->PeerStatus(peer).ok(), "PeerStatus says severed"));
        (void)lane;
        links->Unsubscribe(id);
        return absl::OkStatus();
      });
  EXPECT_THAT(results[0], IsOk());
  EXPECT_THAT(results[1], IsOk());
}

TEST(PeerLinksTest, BadUsesAreRefused) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        PeerLinksOptions zero;
        zero.timeout = absl::ZeroDuration();
        absl::Status bad = PeerLinks::Create(transport, store, kNs, loop, zero).status();
        RETURN_IF_ERROR(Expect(absl::IsInvalidArgument(bad), bad.ToString()));
        absl::Status off_thread;
        std::thread([&] {
          off_thread = PeerLinks::Create(transport, store, kNs, loop, {}).status();
        }).join();
        RETURN_IF_ERROR(Expect(absl::IsFailedPrecondition(off_thread), off_thread.ToString()));
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        absl::Status self = links->Lane(rank).status();
        RETURN_IF_ERROR(Expect(absl::IsInvalidArgument(self), self.ToString()));
        absl::Status negative = links->Subscribe(-1, nullptr).status();
        return Expect(absl::IsInvalidArgument(negative), negative.ToString());
      });
  EXPECT_THAT(results[0], IsOk());
}

}  // namespace
}  // namespace rdmaflow::onesided
