// Messenger: every rank sends every other messages of 0 bytes to several
// slots, all arrive whole and in order; receives match tags in any order,
// posted before or after their message arrived; payload in a send region is
// not staged, and not read once its send is abandoned; a message larger than its receive and a dead peer are errors
// on the operation, never a hang.
#include "onesided/messenger.h"

#include <atomic>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kNs[] = "messenger_test";

MessengerOptions SmallSlots() {
  MessengerOptions options;
  options.slot_bytes = 1024;
  options.slots = 4;
  options.timeout = absl::Seconds(60);
  return options;
}

// Bytes of message `tag` from `from`: a pattern unique to both.
std::vector<uint8_t> Pattern(int from, uint64_t tag, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>(i * 7 + from * 31 + tag * 13);
  }
  return data;
}

absl::Status Drive(Messenger& messenger, absl::FunctionRef<bool()> done) {
  return messenger.ProgressUntil(done, absl::Now() + absl::Seconds(60), "the test");
}

TEST(MessengerTest, AllPairsExchangeMessagesOfEverySizeInOrder) {
  constexpr int kRanks = 3;
  const std::vector<size_t> sizes = {0, 1, 1023, 1024, 1025, 3584, 10000};
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger, Messenger::Create(transport, store, kNs, rank,
                                                           kRanks, SmallSlots()));
        std::vector<std::vector<uint8_t>> outgoing;
        std::vector<std::vector<uint8_t>> incoming;
        outgoing.reserve(kRanks * sizes.size());
        incoming.reserve(kRanks * sizes.size());
        int pending = 0;
        absl::Status failure;
        for (int peer = 0; peer < kRanks; ++peer) {
          if (peer == rank) continue;
          for (size_t bytes : sizes) {
            // One tag for all: order alone tells the messages apart.
            outgoing.push_back(Pattern(rank, bytes, bytes));
            ++pending;
            RETURN_IF_ERROR(messenger->Send(peer, 7, outgoing.back().data(), bytes,
                                            [&](absl::Status s) {
                                              --pending;
                                              failure.Update(s);
                                            }));
            incoming.emplace_back(bytes + 5);
            const size_t index = incoming.size() - 1;
            ++pending;
            RETURN_IF_ERROR(messenger->Recv(
                peer, 7, incoming.back().data(), bytes + 5,
                [&, peer, bytes, index](absl::StatusOr<size_t> got) {
                  --pending;
                  if (!got.ok()) return failure.Update(got.status());
                  EXPECT_EQ(*got, bytes) << "from rank " << peer;
                  incoming[index].resize(bytes);
                  EXPECT_EQ(incoming[index], Pattern(peer, bytes, bytes))
                      << bytes << " bytes from rank " << peer;
                }));
          }
        }
        RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
        EXPECT_TRUE(messenger->idle());
        EXPECT_EQ(messenger->stats().messages_sent, (kRanks - 1) * sizes.size());
        EXPECT_EQ(messenger->stats().messages_received, (kRanks - 1) * sizes.size());
        return failure;
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerTest, ReceivesMatchTagsInAnyOrder) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, SmallSlots()));
        std::vector<std::vector<uint8_t>> sent;
        for (uint64_t tag : {1, 2, 3}) sent.push_back(Pattern(0, tag, 3000 + tag));
        int pending = 0;
        absl::Status failure;
        if (rank == 0) {
          for (uint64_t tag : {1, 2, 3}) {
            ++pending;
            RETURN_IF_ERROR(messenger->Send(1, tag, sent[tag - 1].data(),
                                            sent[tag - 1].size(), [&](absl::Status s) {
                                              --pending;
                                              failure.Update(s);
                                            }));
          }
          RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
          // Rank 1 has taken everything: a last message tells us.
          uint8_t bye = 0;
          bool got = false;
          RETURN_IF_ERROR(messenger->Recv(1, 99, &bye, 1, [&](absl::StatusOr<size_t> s) {
            failure.Update(s.status());
            got = true;
          }));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return got; }));
          return failure;
        }
        // Tag 3 is posted first, while 1 and 2 arrive unexpected; 1 is
        // posted once everything has arrived.
        std::vector<std::vector<uint8_t>> received(4, std::vector<uint8_t>(4000));
        auto receive = [&](uint64_t tag) {
          ++pending;
          return messenger->Recv(0, tag, received[tag].data(), 4000,
                                 [&, tag](absl::StatusOr<size_t> got) {
                                   --pending;
                                   if (!got.ok()) return failure.Update(got.status());
                                   received[tag].resize(*got);
                                 });
        };
        RETURN_IF_ERROR(receive(3));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
        RETURN_IF_ERROR(receive(2));
        RETURN_IF_ERROR(receive(1));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
        RETURN_IF_ERROR(failure);
        for (uint64_t tag : {1, 2, 3}) EXPECT_EQ(received[tag], sent[tag - 1]) << tag;
        EXPECT_GE(messenger->stats().unexpected_messages, 1);
        uint8_t bye = 1;
        bool sent_bye = false;
        RETURN_IF_ERROR(messenger->Send(0, 99, &bye, 1, [&](absl::Status s) {
          failure.Update(s);
          sent_bye = true;
        }));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return sent_bye; }));
        return failure;
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerTest, PayloadInASendRegionIsNotStaged) {
  constexpr size_t kBytes = 5000;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, SmallSlots()));
        ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(2 * kBytes));
        messenger->AddSendRegion(&region);
        const std::vector<uint8_t> data = Pattern(rank, 5, kBytes);
        std::memcpy(region.data() + 100, data.data(), kBytes);
        std::vector<uint8_t> staged_data = Pattern(rank, 6, kBytes);
        std::vector<uint8_t> in_place(kBytes), staged(kBytes);
        int pending = 4;
        absl::Status failure;
        auto sent = [&](absl::Status s) {
          --pending;
          failure.Update(s);
        };
        auto received = [&](absl::StatusOr<size_t> s) {
          --pending;
          failure.Update(s.status());
        };
        const int peer = 1 - rank;
        RETURN_IF_ERROR(messenger->Send(peer, 5, region.data() + 100, kBytes, sent));
        RETURN_IF_ERROR(messenger->Send(peer, 6, staged_data.data(), kBytes, sent));
        RETURN_IF_ERROR(messenger->Recv(peer, 5, in_place.data(), kBytes, received));
        RETURN_IF_ERROR(messenger->Recv(peer, 6, staged.data(), kBytes, received));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
        RETURN_IF_ERROR(failure);
        EXPECT_EQ(in_place, Pattern(peer, 5, kBytes));
        EXPECT_EQ(staged, Pattern(peer, 6, kBytes));
        EXPECT_EQ(messenger->stats().staged_bytes, kBytes);  // only the second
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// A send written from a send region and abandoned with some pieces posted
// and others still queued (the endpoint takes 3 operations at a time): the
// receiver gets the bytes as they were when the send was abandoned, never
// what the caller wrote there afterwards.
TEST(MessengerTest, AnAbandonedSendNeverReadsItsSendRegionAgain) {
  constexpr size_t kBytes = 4096;  // 4 pieces of 1 KiB
  rdma::testing::RankThreadsOptions threads;
  threads.max_outstanding_per_endpoint = 3;
  // The sender stays (and progresses) until the receiver has its message:
  // a receiver that connects only after the sender's transport is gone
  // would fail on that instead.
  std::atomic<bool> received{false};
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2,
      [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, SmallSlots()));
        const std::vector<uint8_t> data = Pattern(0, 9, kBytes);
        if (rank == 1) {
          std::vector<uint8_t> got(kBytes);
          std::optional<absl::StatusOr<size_t>> outcome;
          RETURN_IF_ERROR(messenger->Recv(0, 9, got.data(), kBytes,
                                          [&](absl::StatusOr<size_t> s) { outcome = s; }));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
          RETURN_IF_ERROR(outcome->status());
          EXPECT_EQ(**outcome, kBytes);
          EXPECT_EQ(got, data) << "bytes written after the send was abandoned reached the peer";
          received = true;
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(kBytes));
        messenger->AddSendRegion(&region);
        std::memcpy(region.data(), data.data(), kBytes);
        std::optional<absl::Status> sent;
        ASSIGN_OR_RETURN(Messenger::OpId op,
                         messenger->Send(1, 9, region.data(), kBytes,
                                         [&](absl::Status s) { sent = s; }));
        // One round cuts every piece and posts what the endpoint takes.
        RETURN_IF_ERROR(messenger->Progress());
        messenger->Abandon(op, absl::CancelledError("the test gives up"));
        EXPECT_THAT(sent, ::testing::Optional(StatusIs(absl::StatusCode::kCancelled)));
        std::memset(region.data(), 0xEE, kBytes);  // the caller reuses its buffer
        RETURN_IF_ERROR(Drive(*messenger, [&] { return messenger->idle(); }));
        // Some pieces went from the region, the rest from staging.
        EXPECT_GT(messenger->stats().staged_bytes, 0u);
        EXPECT_LT(messenger->stats().staged_bytes, kBytes);
        return Drive(*messenger, [&] { return received.load(); });
      },
      threads);
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerTest, AMessageLargerThanItsReceiveIsAnError) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, SmallSlots()));
        std::vector<uint8_t> data(3000, 1);
        std::optional<absl::Status> outcome;
        if (rank == 0) {
          RETURN_IF_ERROR(messenger->Send(1, 1, data.data(), data.size(),
                                          [&](absl::Status s) { outcome = s; }));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
          RETURN_IF_ERROR(*outcome);
          outcome.reset();
          RETURN_IF_ERROR(messenger->Recv(1, 2, data.data(), 10, [&](absl::StatusOr<size_t> s) {
            outcome = s.status();
          }));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
          return *outcome;
        }
        RETURN_IF_ERROR(messenger->Recv(0, 1, data.data(), 100,
                                        [&](absl::StatusOr<size_t> s) { outcome = s.status(); }));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        EXPECT_THAT(*outcome, StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("3000 bytes, the receive room for 100")));
        // The link is still good afterwards.
        outcome.reset();
        RETURN_IF_ERROR(messenger->Send(0, 2, data.data(), 10,
                                        [&](absl::Status s) { outcome = s; }));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        return *outcome;
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerTest, ADeadPeerFailsItsPendingOperations) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreadsOwning(
      2, [&](int rank, std::unique_ptr<rdma::Transport>& transport,
             rdma::Store& store) -> absl::Status {
        MessengerOptions options = SmallSlots();
        options.liveness_interval = absl::Milliseconds(50);
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(*transport, store, kNs, rank, 2, options));
        if (rank == 1) {
          // Dies, once rank 0 is connected, without sending what it waits for.
          RETURN_IF_ERROR(store.Get("connected", absl::Seconds(60)).status());
          messenger.reset();
          transport.reset();
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(store.Set("connected", "1"));
        uint8_t byte = 0;
        std::optional<absl::Status> outcome;
        RETURN_IF_ERROR(messenger->Recv(1, 1, &byte, 1,
                                        [&](absl::StatusOr<size_t> s) { outcome = s.status(); }));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        EXPECT_THAT(*outcome, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
        EXPECT_THAT(messenger->PeerStatus(1), StatusIs(absl::StatusCode::kUnavailable));
        // Later operations on the dead peer fail at once.
        EXPECT_THAT(messenger->Send(1, 1, &byte, 1, [](absl::Status) {}),
                    StatusIs(absl::StatusCode::kUnavailable));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Ranks 0, 2 and 3 of 4 talk among themselves; rank 1 never creates the
// messenger, so a member that waited for it would time out.
TEST(MessengerTest, MembersTalkWithoutTheRanksLeftOut) {
  constexpr int kRanks = 4;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      kRanks, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1) return absl::OkStatus();
        MessengerOptions options = SmallSlots();
        options.members = {3, 0, 2};
        options.timeout = absl::Seconds(20);
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, kRanks, options));
        uint8_t byte = 0;
        EXPECT_THAT(messenger->Send(1, 1, &byte, 1, [](absl::Status) {}),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("members 3,0,2")));
        std::vector<std::vector<uint8_t>> in;
        std::vector<std::vector<uint8_t>> out;
        in.reserve(kRanks);
        out.reserve(kRanks);
        int pending = 0;
        absl::Status failure;
        for (int peer : options.members) {
          if (peer == rank) continue;
          out.push_back(Pattern(rank, peer, 100));
          in.emplace_back(100);
          pending += 2;
          RETURN_IF_ERROR(messenger->Send(peer, 9, out.back().data(), 100, [&](absl::Status s) {
            --pending;
            failure.Update(s);
          }));
          RETURN_IF_ERROR(messenger->Recv(peer, 9, in.back().data(), 100,
                                          [&, peer, at = in.size() - 1](absl::StatusOr<size_t> got) {
                                            --pending;
                                            if (!got.ok()) return failure.Update(got.status());
                                            if (in[at] != Pattern(peer, rank, 100)) {
                                              failure.Update(absl::DataLossError("garbled"));
                                            }
                                          }));
        }
        RETURN_IF_ERROR(Drive(*messenger, [&] { return pending == 0; }));
        return failure;
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerTest, RefusesBadRanksAndOptions) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        MessengerOptions bad = SmallSlots();
        bad.slot_bytes = 100;
        EXPECT_THAT(Messenger::Create(transport, store, kNs, rank, 1, bad),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of 64")));
        EXPECT_THAT(Messenger::Create(transport, store, kNs, 3, 2, SmallSlots()),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        for (std::vector<int> members : {std::vector<int>{1}, std::vector<int>{0, 0},
                                         std::vector<int>{0, -1}}) {
          MessengerOptions stray = SmallSlots();
          stray.members = members;
          EXPECT_THAT(Messenger::Create(transport, store, kNs, rank, 1, stray),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("must be distinct ranks")));
        }
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 1, SmallSlots()));
        uint8_t byte = 0;
        EXPECT_THAT(messenger->Send(0, 1, &byte, 1, [](absl::Status) {}),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("itself")));
        EXPECT_THAT(messenger->Recv(5, 1, &byte, 1, [](absl::StatusOr<size_t>) {}),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 5")));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::onesided
