// File: mailbox_racing_test.cc
// Mailbox::Collect() against a sender that rewrites its slot in our inbox
// while it is collected (rdma/testing/racing_writer.h): the whole slot
// flipping between images whose stamps go forward and back, and random
// bytes over the stamp and the message. On the loopback fabric a region's
// address is its memory, so the writer writes the inbox in place, as a
// NIC would. Every Collect() delivers a private copy (it stays as it was
// while the inbox keeps changing), never more messages than the slot had
// rising whole stamps, and a stamp going back fails the sender with
// kDataLoss naming it, for good: nothing is delivered from it afterwards.
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "onesided/mailbox.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/racing_writer.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::rdma::testing::RaceOptions;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RacingWriter;

// 64-byte messages: rank 1's slot in rank 0's inbox is the stamp word padded
// to 64 bytes, then the message (mailbox.h), after rank 0's own slot.
constexpr size_t kBytes = 64;
constexpr size_t kSlot = 64 + kBytes;
constexpr int kEpisodes = 60;
constexpr int kMaxEpisodes = 1000;

// A whole slot: `stamp`, padding, then a message whose every word is `fill`.
std::vector<std::byte> SlotImage(uint64_t stamp, uint64_t fill) {
  std::vector<uint64_t> words(kSlot / 8, 0);
  words[0] = stamp;
  for (size_t w = 64 / 8; w < kSlot / 8; ++w) words[w] = fill;
  std::vector<std::byte> bytes(kSlot);
  std::memcpy(bytes.data(), words.data(), kSlot);
  return bytes;
}

struct Totals {
  RaceTally tally;
  int64_t delivered = 0;
  int64_t failed_episodes = 0;

  void Add(const RaceTally& episode) {
    tally.calls += episode.calls;
    tally.ok += episode.ok;
    tally.data_loss += episode.data_loss;
    tally.writer_rounds += episode.writer_rounds;
    if (tally.other == 0) tally.first_other = episode.first_other;
    tally.other += episode.other;
  }
};

// Episodes of one mailbox each (rank 0 of 2; rank 1 is the racing writer,
// started by `race(slot)` over rank 1's slot in the fresh inbox). Each call
// collects once; `max_deliveries` bounds what one mailbox may deliver.
void RunEpisodes(const std::string& name, int64_t max_deliveries,
                 const std::function<std::unique_ptr<RacingWriter>(absl::Span<std::byte>)>& race,
                 Totals& totals) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      1, [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ProgressLoop loop(transport, ProgressLoopOptions{});
        // kEpisodes, and more (up to kMaxEpisodes, a millisecond apart)
        // until both a delivery and a failed sender were seen: on a loaded
        // machine the writer may get the core only between the reader's
        // calls.
        for (int episode = 0;
             episode < kEpisodes ||
             (episode < kMaxEpisodes && (totals.delivered == 0 || totals.failed_episodes == 0));
             ++episode) {
          if (episode >= kEpisodes) absl::SleepFor(absl::Milliseconds(1));
          const std::string ns = absl::StrCat("mailbox_racing_", name, "_", episode);
          ASSIGN_OR_RETURN(auto box,
                           Mailbox::Create(loop, store, ns, 0, 2, kBytes, absl::Seconds(60)));
          ASSIGN_OR_RETURN(rdma::RemoteRegion inbox,
                           rdma::FetchRegion(store, ns, "mailbox/0", absl::Seconds(60)));
          std::byte* const inbox_bytes = reinterpret_cast<std::byte*>(inbox.address);
          std::unique_ptr<RacingWriter> writer = race(absl::MakeSpan(inbox_bytes + kSlot, kSlot));
          int64_t delivered = 0;
          std::optional<absl::Status> failure;
          RaceOptions options;
          options.min_calls = 50;
          options.min_writer_rounds = 100;
          const RaceTally tally = RaceParse(
              *writer,
              [&]() -> absl::Status {
                std::optional<absl::Status> wrong;
                const int got = box->Collect([&](int sender, const std::byte* message) {
                  if (sender != 1) wrong = absl::InternalError(absl::StrCat("sender ", sender));
                  if (message >= inbox_bytes && message < inbox_bytes + inbox.length) {
                    wrong = absl::InternalError("delivered the inbox, not a copy");
                    return;
                  }
                  // The copy is ours: it stays as it is while the writer
                  // goes on rewriting the slot.
                  std::vector<std::byte> first(message, message + kBytes);
                  const uint64_t round = writer->rounds();
                  for (int spin = 0; spin < 100000 && writer->rounds() < round + 2; ++spin) {
                  }
                  if (std::memcmp(first.data(), message, kBytes) != 0) {
                    wrong = absl::InternalError("the delivered message changed under us");
                  }
                });
                if (wrong.has_value()) return *wrong;
                delivered += got;
                if (delivered > max_deliveries) {
                  return absl::InternalError(absl::StrCat(delivered, " messages delivered from ",
                                                          max_deliveries, " rising stamps"));
                }
                const absl::Status status = box->PeerStatus(1);
                if (failure.has_value()) {
                  if (got != 0 || status != *failure) {
                    return absl::InternalError(
                        absl::StrCat("a failed sender delivered ", got, " or changed its error to ",
                                     status.ToString(), " from ", failure->ToString()));
                  }
                } else if (!status.ok()) {
                  if (got != 0) {
                    return absl::InternalError("delivered from the sender it found failed");
                  }
                  const std::string message(status.message());
                  if (message.find(absl::StrCat("mailbox '", ns, "' of rank 0: rank 1")) ==
                          std::string::npos ||
                      message.find("went back from") == std::string::npos) {
                    return absl::InternalError(absl::StrCat("the refusal: ", message));
                  }
                  failure = status;
                }
                return status;
              },
              options);
          totals.Add(tally);
          totals.delivered += delivered;
          totals.failed_episodes += failure.has_value() ? 1 : 0;
        }
        return absl::OkStatus();
      });
  EXPECT_OK(results[0]);
}

// The slot flips between message 2 (stamp 4), message 3 being written
// (stamp 5) and whole (stamp 6), and back to 4: each word lands whole, the
// stamp first, as a sender that does not bracket would write them. At most
// messages 2 and 3 are delivered, once each; going back fails the sender.
TEST(MailboxRacingTest, ASlotFlippingBackFailsItsSenderAndNothingIsReplayed) {
  Totals totals;
  RunEpisodes(
      "flip", 2,
      [](absl::Span<std::byte> slot) {
        return RacingWriter::Flipping(slot, 0, {SlotImage(4, 2), SlotImage(5, 3), SlotImage(6, 3)},
                                      RacingWriter::Tearing::kWords);
      },
      totals);
  EXPECT_EQ(totals.tally.other, 0) << totals.tally.first_other;
  EXPECT_GT(totals.delivered, 0);
  EXPECT_GT(totals.failed_episodes, 0);
  RecordProperty("delivered", static_cast<int>(totals.delivered));
  RecordProperty("failed_episodes", static_cast<int>(totals.failed_episodes));
  RecordProperty("writer_rounds", static_cast<int>(totals.tally.writer_rounds));
}

// Random bytes over the stamp and the message: any count of deliveries a
// rising stamp allows, each a private copy; kDataLoss when it goes back.
TEST(MailboxRacingTest, AScribbledSlotIsCollectedAsCopiesOrFailsItsSender) {
  Totals totals;
  uint64_t seed = 1;
  RunEpisodes(
      "scribble", std::numeric_limits<int64_t>::max(),
      [&](absl::Span<std::byte> slot) {
        // The whole slot: the stamp word, its padding and the message.
        return RacingWriter::Scribbling(slot, 0, slot.size(), seed++);
      },
      totals);
  EXPECT_EQ(totals.tally.other, 0) << totals.tally.first_other;
  EXPECT_GT(totals.failed_episodes, 0);
  RecordProperty("delivered", static_cast<int>(totals.delivered));
  RecordProperty("failed_episodes", static_cast<int>(totals.failed_episodes));
}

}  // namespace
}  // namespace rdmaflow::onesided
