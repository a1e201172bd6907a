// Mailbox against a hostile peer: rank 1 creates its mailbox like any rank,
// then writes forged stamps and messages straight into its slot in rank 0's
// inbox through a raw endpoint, as a buggy or malicious peer could. A stamp
// that goes back fails rank 1 with kDataLoss for good (nothing more is
// delivered from it, Send() and Probe() to it return that error), and rank 0
// never delivers a message twice, out of order or torn. Random stamps check
// the same against a model of the protocol. Sizes that wrap and a peer
// whose mailbox has another layout are refused before anything is written.
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/mailbox.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/raw_peer.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// Messages of 64 bytes: a slot is the stamp word padded to 64 bytes, then
// the message (mailbox.h's wire layout); rank 1's slot is the second.
constexpr size_t kBytes = 64;
constexpr size_t kSlot = 64 + kBytes;
constexpr uint64_t kMax = ~uint64_t{0};

// Rank 1's raw access to its slot in rank 0's inbox.
class Attacker {
 public:
  static absl::StatusOr<Attacker> Connect(rdma::Transport& transport, rdma::Store& store,
                                          const std::string& ns) {
    ASSIGN_OR_RETURN(rdma::testing::RawPeer peer,
                     rdma::testing::RawPeer::Connect(transport, store, ns, 0, kSlot));
    Attacker a(std::move(peer));
    ASSIGN_OR_RETURN(a.inbox_, rdma::FetchRegion(store, ns, "mailbox/0", absl::Seconds(60)));
    return a;
  }

  // Writes a message whose every word is `fill`, then `stamp`, into rank
  // 1's slot at rank 0 (each write completes before the next is posted).
  absl::Status Forge(uint64_t stamp, uint64_t fill) {
    std::vector<uint64_t> words(kBytes / 8, fill);
    RETURN_IF_ERROR(peer_.Write(inbox_, kSlot + 64,
                                absl::MakeConstSpan(reinterpret_cast<const std::byte*>(
                                                        words.data()),
                                                    kBytes)));
    return peer_.WriteWord(inbox_, kSlot, stamp);
  }

 private:
  explicit Attacker(rdma::testing::RawPeer peer) : peer_(std::move(peer)) {}

  rdma::testing::RawPeer peer_;
  rdma::RemoteRegion inbox_;
};

// What rank 0 saw of one forged stamp.
struct Seen {
  int delivered = 0;
  uint64_t first_word = 0;
  bool whole = true;  // every word of the message equal
};

// Rank 1 forges `stamps` one at a time (message words = the stamp); after
// each, rank 0 collects once and `judge(i, seen, box)` checks what it got.
void RunForgery(const std::string& ns, const std::vector<uint64_t>& stamps,
                const std::function<void(size_t, const Seen&, Mailbox&)>& judge) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, ns, rank, 2, kBytes,
                                                   absl::Seconds(60)));
        RETURN_IF_ERROR(box->Connect(1 - rank));
        if (rank == 1) {
          ASSIGN_OR_RETURN(Attacker attacker, Attacker::Connect(transport, store, ns));
          for (size_t i = 0; i < stamps.size(); ++i) {
            RETURN_IF_ERROR(attacker.Forge(stamps[i], stamps[i]));
            RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/forged/", i), "1"));
            RETURN_IF_ERROR(
                store.Get(absl::StrCat(ns, "/judged/", i), absl::Seconds(60)).status());
          }
          return absl::OkStatus();
        }
        for (size_t i = 0; i < stamps.size(); ++i) {
          RETURN_IF_ERROR(
              store.Get(absl::StrCat(ns, "/forged/", i), absl::Seconds(60)).status());
          Seen seen;
          seen.delivered = box->Collect([&](int sender, const std::byte* message) {
            EXPECT_EQ(sender, 1);
            const uint64_t* words = reinterpret_cast<const uint64_t*>(message);
            seen.first_word = words[0];
            for (size_t w = 0; w < kBytes / 8; ++w) seen.whole &= words[w] == words[0];
          });
          judge(i, seen, *box);
          RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/judged/", i), "1"));
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MailboxHostileTest, StampGoingBackIsDataLossNotAReplay) {
  // Message 2 is delivered; then the slot says message 1 again: an old
  // message replayed (delivered a second time before).
  RunForgery("mailbox_hostile_back", {4, 2, 6},
             [](size_t i, const Seen& seen, Mailbox& box) {
               if (i == 0) {
                 EXPECT_EQ(seen.delivered, 1);
                 EXPECT_EQ(seen.first_word, 4u);
                 EXPECT_OK(box.PeerStatus(1));
                 return;
               }
               // 2 < 4: failed; and 6 afterwards is not delivered either.
               EXPECT_EQ(seen.delivered, 0) << "forgery " << i;
               EXPECT_THAT(box.PeerStatus(1),
                           StatusIs(absl::StatusCode::kDataLoss,
                                    HasSubstr("went back from 4 to 2")));
               std::vector<uint64_t> message(kBytes / 8, 7);
               EXPECT_THAT(box.Send(1, reinterpret_cast<const std::byte*>(message.data())),
                           StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 1")));
               EXPECT_THAT(box.Probe(1), StatusIs(absl::StatusCode::kDataLoss));
             });
}

TEST(MailboxHostileTest, OddStampGoingBackIsDataLossNotABusySlot) {
  // A "being written" stamp below the delivered one: counted as a busy slot
  // forever before.
  RunForgery("mailbox_hostile_odd", {6, 1}, [](size_t i, const Seen& seen, Mailbox& box) {
    if (i == 0) {
      EXPECT_EQ(seen.delivered, 1);
      return;
    }
    EXPECT_EQ(seen.delivered, 0);
    EXPECT_EQ(box.busy_slots(), 0);
    EXPECT_THAT(box.PeerStatus(1), StatusIs(absl::StatusCode::kDataLoss,
                                            HasSubstr("went back from 6 to 1")));
  });
}

TEST(MailboxHostileTest, ExtremeStampsAreOrderedNotOverflowed) {
  // 2^63, then 2^64 - 2 (the largest even), then 2^64 - 1 (busy for ever:
  // harmless), then 2^63 + 2: back.
  const uint64_t half = uint64_t{1} << 63;
  RunForgery("mailbox_hostile_extreme", {half, kMax - 1, kMax, half + 2},
             [&](size_t i, const Seen& seen, Mailbox& box) {
               switch (i) {
                 case 0:
                 case 1:
                   EXPECT_EQ(seen.delivered, 1) << i;
                   EXPECT_EQ(seen.first_word, i == 0 ? half : kMax - 1);
                   EXPECT_OK(box.PeerStatus(1));
                   break;
                 case 2:
                   EXPECT_EQ(seen.delivered, 0);
                   EXPECT_EQ(box.busy_slots(), 1);
                   EXPECT_OK(box.PeerStatus(1));
                   break;
                 default:
                   EXPECT_EQ(seen.delivered, 0);
                   EXPECT_THAT(box.PeerStatus(1), StatusIs(absl::StatusCode::kDataLoss));
               }
             });
}

// Random forged stamps against a model of the protocol: a message is
// delivered exactly when its stamp is even and above the last delivered one,
// whole and holding what was written with that stamp; the first stamp below
// it fails the sender, after which nothing is delivered.
TEST(MailboxHostileTest, RandomStampsFollowTheModel) {
  const uint64_t seed = 20240611;
  std::mt19937_64 random(seed);
  int deliveries = 0;
  int failed_rounds = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<uint64_t> stamps;
    uint64_t high = 0;
    for (int i = 0; i < 40; ++i) {
      uint64_t stamp = 0;
      switch (random() % 8) {
        case 0:  // back
          stamp = high == 0 ? 0 : random() % high;
          break;
        case 1:  // anywhere
          stamp = random();
          break;
        case 2:  // being written
          stamp = (high | 1) + 2 * (random() % 3);
          break;
        case 3:  // the same again
          stamp = high;
          break;
        default:  // the next, or a jump (a sender faster than the collector)
          stamp = high + 2 * (1 + random() % 1000);
      }
      stamps.push_back(stamp);
      if (stamp % 2 == 0 && stamp > high) high = stamp;
    }
    uint64_t delivered = 0;
    bool failed = false;
    RunForgery(absl::StrCat("mailbox_hostile_random", round), stamps,
               [&](size_t i, const Seen& seen, Mailbox& box) {
                 const uint64_t stamp = stamps[i];
                 SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round, " forgery ", i,
                                           ": stamp ", stamp, " after ", delivered));
                 if (!failed && stamp < delivered) failed = true;
                 const bool expect = !failed && stamp % 2 == 0 && stamp > delivered;
                 EXPECT_EQ(seen.delivered, expect ? 1 : 0);
                 if (expect) {
                   EXPECT_EQ(seen.first_word, stamp);
                   EXPECT_TRUE(seen.whole);
                   delivered = stamp;
                   ++deliveries;
                 }
                 EXPECT_EQ(box.PeerStatus(1).ok(), !failed) << box.PeerStatus(1);
               });
    failed_rounds += failed ? 1 : 0;
  }
  // The seed exercises both sides of the model.
  EXPECT_GE(deliveries, 40);
  EXPECT_GE(failed_rounds, 4);
  ::testing::Test::RecordProperty("deliveries", deliveries);
}

TEST(MailboxHostileTest, SizesThatWrapAreRefused) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        // The slot (message + 64-byte stamp, rounded) wraps, or world slots
        // of it do: a tiny inbox and a huge copy buffer before.
        for (const auto& [world, bytes] : std::vector<std::pair<int, size_t>>{
                 {2, kMax}, {2, kMax - 64}, {2, uint64_t{1} << 63}, {4, uint64_t{1} << 62}}) {
          EXPECT_THAT(Mailbox::Create(loop, store, "mailbox_hostile_sizes", 0, world,
                                      bytes, absl::Seconds(1)),
                      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")))
              << world << " x " << bytes;
        }
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

TEST(MailboxHostileTest, PeerOfAnotherLayoutIsRefused) {
  // Rank 1's inbox holds 128-byte messages: large enough for rank 0's
  // 64-byte slots, but laid out differently (connected before).
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        const char* ns = "mailbox_hostile_layout";
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, ns, rank, 2,
                                                   rank == 0 ? kBytes : 2 * kBytes,
                                                   absl::Seconds(60)));
        if (rank == 0) {
          EXPECT_THAT(box->Connect(1),
                      StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("'2 slots of 128 bytes' but this rank with "
                                         "'2 slots of 64 bytes'")));
        }
        return rdma::Barrier(store, ns, "done", 2, absl::Seconds(60));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::onesided
