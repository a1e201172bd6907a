// Mailboxes: a receiver collecting while a sender overwrites its slot as
// fast as it can never gets a torn message, and sees versions only go up;
// each message is delivered once; bad uses are refused.
#include "onesided/mailbox.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/rank_threads.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "mailbox_test";

std::vector<uint64_t> Filled(size_t bytes, uint64_t value) {
  return std::vector<uint64_t>(bytes / sizeof(uint64_t), value);
}

const std::byte* Bytes(const std::vector<uint64_t>& words) {
  return reinterpret_cast<const std::byte*>(words.data());
}

TEST(MailboxTest, CollectNeverDeliversATornMessageWhileTheSenderOverwrites) {
  constexpr size_t kBytes = size_t{1} << 20;
  constexpr uint64_t kMessages = 300;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, kNs, rank, 2, kBytes,
                                                   absl::Seconds(60)));
        if (rank == 1) {
          RETURN_IF_ERROR(box->Connect(0));
          for (uint64_t k = 1; k <= kMessages; ++k) {
            RETURN_IF_ERROR(box->Send(0, Bytes(Filled(kBytes, k))));
          }
          return absl::OkStatus();
        }
        uint64_t last = 0;
        int deliveries = 0;
        absl::Status torn;
        const absl::Time deadline = absl::Now() + absl::Seconds(120);
        while (last < kMessages) {
          if (absl::Now() > deadline) {
            return absl::DeadlineExceededError(
                absl::StrCat("the last message never arrived; last ", last));
          }
          deliveries += box->Collect([&](int sender, const std::byte* message) {
            EXPECT_EQ(sender, 1);
            const uint64_t* words = reinterpret_cast<const uint64_t*>(message);
            for (size_t w = 0; w < kBytes / sizeof(uint64_t); ++w) {
              if (words[w] != words[0]) {
                torn = absl::DataLossError(absl::StrCat("word ", w, " holds ", words[w],
                                                        ", word 0 ", words[0]));
                break;
              }
            }
            EXPECT_GT(words[0], last);
            last = words[0];
          });
          RETURN_IF_ERROR(torn);
        }
        EXPECT_GE(deliveries, 1);
        ::testing::Test::RecordProperty("deliveries", deliveries);
        ::testing::Test::RecordProperty("busy_slots", static_cast<int>(box->busy_slots()));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// On links, the mailbox sends on the peer's data lane (no endpoint of its
// own), and a send that finds the peer gone severs it on the links:
// another protocol subscribed to it hears, and later sends say why.
// Counts the endpoints connected through it.
class CountingTransport : public rdma::testing::TransportWrapper {
 public:
  using TransportWrapper::TransportWrapper;
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(const rdma::PeerInfo& peer) override {
    ++connects;
    return TransportWrapper::Connect(peer);
  }
  int connects = 0;
};

TEST(MailboxTest, OnLinksItSharesTheDataLaneAndSeversAPeerItFindsGone) {
  constexpr size_t kBytes = 64;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        rdma::testing::FaultyTransport faulty(transport);
        CountingTransport counting(faulty);
        ProgressLoop loop(counting, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links,
                         PeerLinks::Create(counting, store, "mailbox_links", loop, {}));
        const int peer = 1 - rank;
        absl::Status heard;
        ASSIGN_OR_RETURN(const int64_t watch,
                         links->Subscribe(peer, [&](int, const absl::Status& status) {
                           heard = status;
                         }));
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(*links, 2, kBytes, absl::Seconds(60)));
        RETURN_IF_ERROR(box->Connect(peer));
        EXPECT_EQ(counting.connects, 1) << "the mailbox connected an endpoint of its own";
        if (rank == 1) {
          RETURN_IF_ERROR(box->Send(0, Bytes(Filled(kBytes, 7))));
          RETURN_IF_ERROR(store.Wait({"mailbox_links/test/delivered"}, absl::Seconds(60)));
          // The next write towards rank 0 fails as if rank 0 had died.
          rdma::testing::FaultyTransport::Fault kill;
          kill.peer = 0;
          kill.action = rdma::testing::FaultyTransport::Action::kKillPeer;
          faulty.AddFault(kill);
          EXPECT_THAT(box->Send(0, Bytes(Filled(kBytes, 8))),
                      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("mailbox of rank 1")));
          EXPECT_THAT(heard, StatusIs(absl::StatusCode::kUnavailable));
          EXPECT_THAT(links->PeerStatus(0), StatusIs(absl::StatusCode::kUnavailable));
          EXPECT_THAT(box->Send(0, Bytes(Filled(kBytes, 9))),
                      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("mailbox of rank 1")));
        } else {
          int delivered = 0;
          const absl::Time deadline = absl::Now() + absl::Seconds(60);
          while (delivered == 0) {
            if (absl::Now() > deadline) return absl::DeadlineExceededError("no message");
            delivered += box->Collect([&](int sender, const std::byte* message) {
              EXPECT_EQ(sender, 1);
              EXPECT_EQ(reinterpret_cast<const uint64_t*>(message)[0], 7u);
            });
          }
          RETURN_IF_ERROR(store.Set("mailbox_links/test/delivered", "1"));
          // Stays until rank 1 is done with its links.
          RETURN_IF_ERROR(store.Wait({"mailbox_links/test/done"}, absl::Seconds(60)));
        }
        links->Unsubscribe(watch);
        box.reset();
        if (rank == 1) RETURN_IF_ERROR(store.Set("mailbox_links/test/done", "1"));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MailboxTest, ASendThatTimesOutIsFencedOnTheLinks) {
  // Rank 1's write towards rank 0 never completes (a peer that stopped
  // answering). The send times out after posting and ends the write
  // through the links' fence: the peer is severed there, so every protocol
  // on the links hears of it, instead of the lane being closed behind the
  // links' back (where a protocol sharing it would only find it closed).
  constexpr size_t kBytes = 64;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        rdma::testing::FaultyTransport faulty(transport);
        ProgressLoop loop(faulty, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(faulty, store, "mailbox_fence", loop, {}));
        const int peer = 1 - rank;
        absl::Status heard;
        ASSIGN_OR_RETURN(const int64_t watch,
                         links->Subscribe(peer, [&](int, const absl::Status& status) {
                           heard = status;
                         }));
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(*links, 2, kBytes, absl::Milliseconds(300)));
        RETURN_IF_ERROR(box->Connect(peer));
        if (rank == 1) {
          rdma::testing::FaultyTransport::Fault drop;
          drop.peer = 0;
          drop.op = rdma::testing::FaultyTransport::Op::kWrite;
          drop.action = rdma::testing::FaultyTransport::Action::kDrop;
          faulty.AddFault(drop);
          EXPECT_THAT(box->Send(0, Bytes(Filled(kBytes, 7))),
                      StatusIs(absl::StatusCode::kDeadlineExceeded,
                               AllOf(HasSubstr("mailbox of rank 1"),
                                     HasSubstr("fenced rank 0 on the links (severed there "
                                               "while it waited"),
                                     HasSubstr("nothing of it lands later"))));
          EXPECT_THAT(links->PeerStatus(0),
                      StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("mailbox of rank 1 gave up a send to rank 0")));
          EXPECT_THAT(heard, StatusIs(absl::StatusCode::kUnavailable));
          RETURN_IF_ERROR(store.Set("mailbox_fence/test/done", "1"));
        } else {
          // Stays until rank 1 is done with its links.
          RETURN_IF_ERROR(store.Wait({"mailbox_fence/test/done"}, absl::Seconds(60)));
        }
        links->Unsubscribe(watch);
        box.reset();
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MailboxTest, EachMessageIsDeliveredOnceFromEverySender) {
  constexpr int kRanks = 3;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, kNs, rank, kRanks, 40,
                                                   absl::Seconds(60)));
        for (int peer = 0; peer < kRanks; ++peer) {
          if (peer == rank) continue;
          RETURN_IF_ERROR(box->Connect(peer));
          RETURN_IF_ERROR(box->Connect(peer));  // a no-op
          // Two messages: only the second is still there to collect.
          RETURN_IF_ERROR(box->Send(peer, Bytes(Filled(40, 100 + rank))));
          RETURN_IF_ERROR(box->Send(peer, Bytes(Filled(40, 200 + rank))));
        }
        RETURN_IF_ERROR(rdma::Barrier(store, kNs, "sent", kRanks, absl::Seconds(60)));
        std::vector<uint64_t> got(kRanks, 0);
        EXPECT_EQ(box->Collect([&](int sender, const std::byte* message) {
                    got[sender] = reinterpret_cast<const uint64_t*>(message)[4];
                  }),
                  kRanks - 1);
        for (int peer = 0; peer < kRanks; ++peer) {
          EXPECT_EQ(got[peer], peer == rank ? 0 : 200 + peer) << "rank " << rank;
        }
        EXPECT_EQ(box->Collect([](int, const std::byte*) { ADD_FAILURE(); }), 0);
        EXPECT_EQ(box->busy_slots(), 0);
        RETURN_IF_ERROR(rdma::Barrier(store, kNs, "collected", kRanks, absl::Seconds(60)));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MailboxTest, RefusesBadUses) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        EXPECT_THAT(Mailbox::Create(loop, store, kNs, 0, 2, 0, absl::Seconds(1)),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(Mailbox::Create(loop, store, kNs, 2, 2, 8, absl::Seconds(1)),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
        ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, kNs, 0, 2, 8,
                                                   absl::Milliseconds(50)));
        std::vector<uint64_t> message(1, 7);
        EXPECT_THAT(box->Send(1, Bytes(message)),
                    StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Connect")));
        EXPECT_THAT(box->Connect(0), StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(box->Connect(1), StatusIs(absl::StatusCode::kDeadlineExceeded));
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

TEST(MailboxTest, RefusesADescriptorTooShortOrOfAnotherRank) {
  // Descriptors forged under rank 1's inbox key, with rank 1's layout.
  constexpr size_t kInbox = 2 * (64 + 64);  // 2 slots of 64-byte messages
  for (int forgery = 0; forgery < 2; ++forgery) {
    const std::string ns = absl::StrCat("mailbox_test_descriptor", forgery);
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          ProgressLoop loop(transport, ProgressLoopOptions{});
          if (rank == 1) {
            ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(kInbox));
            rdma::RemoteRegion descriptor = region.descriptor();
            if (forgery == 0) {
              descriptor.length = kInbox - 1;  // one byte short
            } else {
              descriptor.owner_rank = 0;
            }
            RETURN_IF_ERROR(rdma::PublishAddress(store, ns, transport));
            RETURN_IF_ERROR(store.Set(ns + "/mailbox/1/layout", "2 slots of 64 bytes"));
            RETURN_IF_ERROR(rdma::PublishRegion(store, ns, "mailbox/1", descriptor));
            return rdma::Barrier(store, ns, "done", 2, absl::Seconds(60));
          }
          ASSIGN_OR_RETURN(auto box, Mailbox::Create(loop, store, ns, 0, 2, 64,
                                                     absl::Seconds(60)));
          EXPECT_THAT(box->Connect(1), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("does not hold 2 slots")));
          return rdma::Barrier(store, ns, "done", 2, absl::Seconds(60));
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
  }
}

}  // namespace
}  // namespace rdmaflow::onesided
