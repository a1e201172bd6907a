// SlotLink: two ranks whose shapes mirror each other connect and carry
// messages both ways through the memory the link laid out, with the flags
// on the lane the shape names; shapes that do
// not mirror, a peer region too small for its shapes and bad shapes are
// refused with errors that say which.
#include "onesided/slots/slot_link.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/waits.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "slot_link_test";
constexpr size_t kPayload = 48;

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

// Both ranks: a ring "msgs" each way (staged sends, kPayload bytes a slot)
// and a flags-only ring "ticks" from rank 0 to rank 1.
SlotLinkOptions Shapes(int rank, int slots) {
  SlotLinkOptions options;
  options.scope = "test/link";
  options.layout = "test v1";
  options.peer = 1 - rank;
  options.out.push_back({"msgs", slots, kPayload, /*stage_sends=*/true});
  options.in.push_back({"msgs", slots, kPayload});
  (rank == 0 ? options.out : options.in).push_back({"ticks", 2, 0});
  return options;
}

// Sends `count` messages (message k: bytes k, k+1, ... ) on ring "msgs" and
// receives as many, checking each; rank 0 also ticks `count` times.
absl::Status Talk(ProgressLoop& loop, SlotLink& link, int rank, int count) {
  const int msgs_out = link.out_index("msgs");
  const int msgs_in = link.in_index("msgs");
  SlotRingSender& sender = link.sender(msgs_out);
  SlotRingReceiver& receiver = link.receiver(msgs_in);
  SlotRingSender* ticker = rank == 0 ? &link.sender(link.out_index("ticks")) : nullptr;
  SlotRingReceiver* ticks = rank == 1 ? &link.receiver(link.in_index("ticks")) : nullptr;
  int received = 0;
  int ticked = 0;
  const auto done = [&] {
    return sender.delivered() == static_cast<uint64_t>(count) && received == count &&
           (ticker == nullptr || ticker->delivered() == static_cast<uint64_t>(count)) &&
           (ticks == nullptr || ticked == count);
  };
  absl::Status failure;
  const auto turn = [&](bool& moved) -> absl::Status {
    RETURN_IF_ERROR(loop.Poll().status());
    ASSIGN_OR_RETURN(bool room, sender.HasRoom());
    if (room && sender.claimed() < static_cast<uint64_t>(count)) {
      const uint64_t seq = sender.Claim();
      std::byte* slot = link.staging(msgs_out, sender.slot(seq));
      for (size_t b = 0; b < kPayload; ++b) slot[b] = std::byte((seq + b + rank) & 0xFF);
      sender.Write(seq, link.staged(msgs_out, sender.slot(seq), 0, kPayload),
                   link.destination(msgs_out, sender.slot(seq), 0, kPayload));
      sender.Commit(seq);
      moved = true;
    }
    if (ticker != nullptr) {
      ASSIGN_OR_RETURN(bool tick_room, ticker->HasRoom());
      if (tick_room && ticker->claimed() < static_cast<uint64_t>(count)) {
        ticker->Commit(ticker->Claim(), /*had_writes=*/false);
        moved = true;
      }
      RETURN_IF_ERROR(ticker->Post());
    }
    RETURN_IF_ERROR(sender.Post());
    ASSIGN_OR_RETURN(bool arrived, receiver.Arrived());
    if (arrived) {
      const std::byte* slot = link.received(msgs_in, receiver.slot());
      const uint64_t seq = receiver.received();
      for (size_t b = 0; b < kPayload; ++b) {
        RETURN_IF_ERROR(Expect(slot[b] == std::byte((seq + b + (1 - rank)) & 0xFF),
                               absl::StrCat("message ", seq, " byte ", b)));
      }
      receiver.Consume();
      ++received;
      moved = true;
    }
    RETURN_IF_ERROR(receiver.PostCredit());
    if (ticks != nullptr) {
      ASSIGN_OR_RETURN(bool tick, ticks->Arrived());
      if (tick) {
        ticks->Consume();
        ++ticked;
        moved = true;
      }
      RETURN_IF_ERROR(ticks->PostCredit());
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(loop.WaitForProgress(turn, done, absl::Seconds(30),
                                       [] { return std::string("the messages"); }, {}));
  return link.failure();
}

TEST(SlotLinkTest, MirroredShapesCarryMessagesBothWays) {
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        ASSIGN_OR_RETURN(auto link, SlotLink::Create(*links, Shapes(rank, 3)));
        RETURN_IF_ERROR(link->Connect("the test"));
        // More messages than slots: the credits come back and slots reuse.
        RETURN_IF_ERROR(Talk(loop, *link, rank, 40));
        RETURN_IF_ERROR(Barrier(loop, store, kNs, "talked", 2, absl::Seconds(30)));
        const bool done = links->Fence({1 - rank}, [&] { return link->in_flight() == 0; },
                                       absl::Now() + absl::Seconds(10), "the test");
        return Expect(done, "the link's operations completed");
      });
  for (const absl::Status& result : results) EXPECT_THAT(result, IsOk());
}

TEST(SlotLinkTest, FlagsGoOnTheLaneTheShapeNames) {
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        SlotLinkOptions shapes = Shapes(rank, 3);
        shapes.out[0].flag_lane = LaneKind::kControl;
        ASSIGN_OR_RETURN(auto link, SlotLink::Create(*links, std::move(shapes)));
        RETURN_IF_ERROR(link->Connect("the test"));
        // Messages pass with their flags on the other lane.
        RETURN_IF_ERROR(Talk(loop, *link, rank, 40));
        RETURN_IF_ERROR(Barrier(loop, store, kNs, "talked", 2, absl::Seconds(30)));
        if (rank == 1) {
          return store.Get(absl::StrCat(kNs, "/judged"), absl::Seconds(30)).status();
        }
        // With rank 0's control lane closed, its next message's write and
        // flush still go (on the data lane), and its flag cannot.
        ASSIGN_OR_RETURN(rdma::Endpoint * control, links->Lane(1, LaneKind::kControl));
        RETURN_IF_ERROR(control->Close());
        SlotRingSender& sender = link->sender(link->out_index("msgs"));
        ASSIGN_OR_RETURN(bool room, sender.HasRoom());
        RETURN_IF_ERROR(Expect(room, "room for message 40"));
        const int out = link->out_index("msgs");
        const uint64_t seq = sender.Claim();
        sender.Write(seq, link->staged(out, sender.slot(seq), 0, kPayload),
                     link->destination(out, sender.slot(seq), 0, kPayload));
        sender.Commit(seq);
        absl::Status waited = loop.WaitFor(
            [&] { return !sender.Post().ok() || sender.delivered() > seq; },
            absl::Now() + absl::Seconds(30), "message 40's flag");
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/judged"), "1"));
        RETURN_IF_ERROR(waited);
        RETURN_IF_ERROR(Expect(sender.written() > seq, "message 40's writes were flushed"));
        return sender.failure();
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("posting to rank 1")));
  EXPECT_THAT(results[1], IsOk());
}

TEST(SlotLinkTest, ShapesThatDoNotMirrorAreRefusedQuotingBoth) {
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        PeerLinksOptions options;
        options.timeout = absl::Seconds(20);
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, options));
        ASSIGN_OR_RETURN(auto link, SlotLink::Create(*links, Shapes(rank, rank == 0 ? 3 : 4)));
        return link->Connect(absl::StrCat("the test on rank ", rank));
      });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(results[rank],
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr(absl::StrCat("the test on rank ", rank)),
                               HasSubstr("msgs 3x48"), HasSubstr("msgs 4x48"))));
  }
}

TEST(SlotLinkTest, APeerRegionTooSmallForItsShapesIsRefused) {
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        ASSIGN_OR_RETURN(auto link, SlotLink::Create(*links, Shapes(rank, 3)));
        const std::string scope = "test/link/link/0-1";
        if (rank == 1) {
          // Rank 1 republishes its record with the same layout and a region
          // of one line: rank 0's writes would land past its end.
          ASSIGN_OR_RETURN(std::string layout,
                           store.Get(links->StoreKey(scope, 1, "layout"), absl::Seconds(5)));
          ASSIGN_OR_RETURN(rdma::MemoryRegion small, transport.Allocate(64));
          RETURN_IF_ERROR(links->Publish({scope, layout, {{"link", &small}}}));
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/forged"), "1"));
          RETURN_IF_ERROR(store.Get(absl::StrCat(kNs, "/judged"), absl::Seconds(30)).status());
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(store.Get(absl::StrCat(kNs, "/forged"), absl::Seconds(30)).status());
        absl::Status connected = link->Connect("the test");
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/judged"), "1"));
        return connected;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDataLoss,
                                   AllOf(HasSubstr("rank 1"), HasSubstr("64 bytes"))));
  EXPECT_THAT(results[1], IsOk());
}

TEST(SlotLinkTest, BadShapesAreRefusedBeforeAnythingIsPublished) {
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, kNs, loop, {}));
        SlotLinkOptions self = Shapes(rank, 2);
        self.peer = rank;
        SlotLinkOptions none;
        none.scope = "test/none";
        none.peer = 1 - rank;
        SlotLinkOptions no_slots = Shapes(rank, 0);
        SlotLinkOptions twice = Shapes(rank, 2);
        twice.out.push_back(twice.out[0]);
        SlotLinkOptions incoming_flags = Shapes(rank, 2);
        incoming_flags.in[0].flag_lane = LaneKind::kControl;
        SlotLinkOptions huge = Shapes(rank, 2);
        huge.in[0].slot_bytes = ~size_t{0} / 2;
        // Staged only at the peer: it is the peer's layout that overflows.
        SlotLinkOptions huge_out = Shapes(rank, 2);
        huge_out.out[0].slot_bytes = ~size_t{0} / 2;
        huge_out.out[0].stage_sends = false;
        const std::vector<std::pair<SlotLinkOptions, std::string>> cases = {
            {self, "another rank"}, {none, "no rings"}, {no_slots, "slots must be >= 1"},
            {twice, "a name of its own"}, {incoming_flags, "the sender's choice"},
            {huge, "do not fit"}, {huge_out, "do not fit"}};
        for (const auto& [options, says] : cases) {
          absl::StatusOr<std::unique_ptr<SlotLink>> link = SlotLink::Create(*links, options);
          RETURN_IF_ERROR(Expect(link.status().code() == absl::StatusCode::kInvalidArgument &&
                                     absl::StrContains(link.status().message(), says),
                                 absl::StrCat("expected '", says, "', got ",
                                              link.status().ToString())));
        }
        return absl::OkStatus();
      });
  for (const absl::Status& result : results) EXPECT_THAT(result, IsOk());
}

}  // namespace
}  // namespace rdmaflow::onesided
