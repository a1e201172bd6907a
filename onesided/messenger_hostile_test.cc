// Messenger against a hostile peer: rank 1 connects like any rank, then
// writes forged piece headers (and credit words) straight into rank 0's
// memory, as a buggy or malicious peer could. Each forged value is refused
// with kDataLoss before a byte is copied (guard bytes around the receive
// stay untouched), an unexpected message too big to buffer waits instead of
// being allocated, and the victim never crashes or hangs. Also: operations
// a caller abandons never touch its buffers again.
#include <cstring>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/faulty_transport.h"
#include "rdma/testing/racing_writer.h"
#include "rdma/testing/raw_peer.h"
#include "onesided/internal/piece_header.h"
#include "onesided/messenger.h"
#include "onesided/slots/slot_link.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::onesided {
namespace {

using internal::PieceHeader;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kNs[] = "messenger_hostile_test";
constexpr size_t kSlotBytes = 1024;
constexpr int kSlots = 4;
constexpr size_t kStride = 64 + kSlotBytes;  // a slot: the piece header, then payload
constexpr uint64_t kMax = ~uint64_t{0};

MessengerOptions Options() {
  MessengerOptions options;
  options.name = "m";
  options.slot_bytes = kSlotBytes;
  options.slots = kSlots;
  options.timeout = absl::Seconds(60);
  options.max_unexpected_bytes = 1 << 20;
  return options;
}

absl::Status Drive(Messenger& messenger, absl::FunctionRef<bool()> done) {
  return messenger.ProgressUntil(done, absl::Now() + absl::Seconds(60), "the test");
}

// Rank 1's raw access to rank 0's side of their slot link
// (onesided/slots/slot_link.h): its ring of pieces from rank 1 and the
// credit word of its ring to rank 1.
class Attacker {
 public:
  static absl::StatusOr<Attacker> Connect(rdma::Transport& transport, rdma::Store& store) {
    ASSIGN_OR_RETURN(rdma::testing::RawPeer peer,
                     rdma::testing::RawPeer::Connect(transport, store, kNs, 0, kStride));
    const SlotRingShape pieces{"pieces", kSlots, kStride};
    ASSIGN_OR_RETURN(SlotLinkLayout layout, SlotLinkLayout::Create({pieces}, {pieces}));
    Attacker a(std::move(peer), layout);
    ASSIGN_OR_RETURN(a.link_, rdma::FetchRegion(store, kNs, "messenger/m/link/0-1/0/link",
                                                absl::Seconds(60)));
    return a;
  }

  // Writes `header` (and a payload of min(bytes, slot) bytes of 0xAB) into
  // the slot of piece `seq`, then its flag.
  absl::Status Piece(uint64_t seq, const PieceHeader& header) {
    const size_t slot = seq % kSlots;
    std::vector<std::byte> bytes(64 + std::min<uint64_t>(header.bytes, kSlotBytes),
                                 std::byte{0xAB});
    std::memcpy(bytes.data(), &header, sizeof(header));
    RETURN_IF_ERROR(peer_.Write(link_, layout_.staging(0) + slot * kStride, bytes));
    return peer_.WriteWord(link_, layout_.flags(0) + slot * 8, seq + 1);
  }

  // Writes `value` as the credit word of rank 0's ring to rank 1.
  absl::Status Credit(uint64_t value) { return peer_.WriteWord(link_, layout_.credit(0), value); }

  // The header of piece `seq`'s slot in rank 0's memory, for a racing
  // writer: on the loopback fabric a region's address is its memory.
  absl::Span<std::byte> HeaderInPlace(uint64_t seq) const {
    return absl::MakeSpan(reinterpret_cast<std::byte*>(link_.address) + layout_.staging(0) +
                              (seq % kSlots) * kStride,
                          sizeof(PieceHeader));
  }

 private:
  Attacker(rdma::testing::RawPeer peer, SlotLinkLayout layout)
      : peer_(std::move(peer)), layout_(std::move(layout)) {}

  rdma::testing::RawPeer peer_;
  SlotLinkLayout layout_;
  rdma::RemoteRegion link_;
};

// A receive of up to 100 bytes with 64 guard bytes on each side.
struct GuardedBuffer {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(64 + 100 + 64, 0x5A);
  uint8_t* data() { return bytes.data() + 64; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < 64; ++i) {
      if (bytes[i] != 0x5A || bytes[64 + 100 + i] != 0x5A) return false;
    }
    return true;
  }
};

// Rank 0 posts a receive of tag 7 (room for 100 bytes) and waits for it;
// rank 1 forges `pieces`. Rank 0's receive must fail with kDataLoss naming
// `expected`, with the guards intact.
void ExpectForgedPiecesRefused(const std::vector<PieceHeader>& pieces,
                               const std::string& expected) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, Options()));
        if (rank == 1) {
          ASSIGN_OR_RETURN(Attacker attacker, Attacker::Connect(transport, store));
          RETURN_IF_ERROR(store.Get("posted", absl::Seconds(60)).status());
          for (size_t seq = 0; seq < pieces.size(); ++seq) {
            RETURN_IF_ERROR(attacker.Piece(seq, pieces[seq]));
          }
          return store.Get("judged", absl::Seconds(60)).status();
        }
        GuardedBuffer buffer;
        std::optional<absl::Status> outcome;
        RETURN_IF_ERROR(messenger->Recv(
            1, 7, buffer.data(), 100,
            [&](absl::StatusOr<size_t> got) { outcome = got.status(); }));
        RETURN_IF_ERROR(store.Set("posted", "1"));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        RETURN_IF_ERROR(store.Set("judged", "1"));
        EXPECT_THAT(*outcome, StatusIs(absl::StatusCode::kDataLoss, HasSubstr(expected)));
        EXPECT_THAT(messenger->PeerStatus(1), StatusIs(absl::StatusCode::kDataLoss));
        EXPECT_TRUE(buffer.GuardsIntact());
        // The peer stays failed: nothing more is read from its slots.
        uint8_t byte = 0;
        EXPECT_THAT(messenger->Send(1, 1, &byte, 1, [](absl::Status) {}),
                    StatusIs(absl::StatusCode::kDataLoss));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerHostileTest, PieceLargerThanTheReceiveIsRefused) {
  // Message of 100 bytes (fits) with a piece of 1000: overflowed before.
  ExpectForgedPiecesRefused({{7, 100, 0, 1000}}, "should have 100 bytes");
}

TEST(MessengerHostileTest, PieceLargerThanTheSlotIsRefused) {
  ExpectForgedPiecesRefused({{7, kMax, 0, kMax}}, "larger than a slot");
}

TEST(MessengerHostileTest, PayloadInAnEmptyMessageIsRefused) {
  // Unexpected (tag 8), empty, with payload: written through null before.
  ExpectForgedPiecesRefused({{8, 0, 0, 64}}, "should have 0 bytes");
}

TEST(MessengerHostileTest, ContinuationOfNothingIsRefused) {
  ExpectForgedPiecesRefused({{7, 5000, 1024, 1024}}, "continues no message");
}

TEST(MessengerHostileTest, ContinuationThatRewindsIsRefused) {
  // Rewinding would write the first bytes twice; a wrapping offset past
  // the receive.
  ExpectForgedPiecesRefused({{8, 3000, 0, 1024}, {8, 3000, 0, 1024}},
                            "new message began");
  ExpectForgedPiecesRefused({{8, 3000, 0, 1024}, {8, 3000, kMax - 512, 1024}},
                            "under way");
}

// A peer rewriting its piece's header while the victim reads it, between
// an honest piece (100 bytes of a 100-byte message), one larger than its
// message and one that continues no message (at offset 60), torn mixes of
// them included: the header is copied once and the copy checked, so each
// round ends at once with the message received whole or kDataLoss, and
// nothing is written outside the receive. (A header claiming a huge
// message would be a slow peer, not a forgery: the receive waits for the
// rest until its timeout.)
TEST(MessengerHostileTest, AHeaderRewrittenWhileItIsReadIsReadOnce) {
  int received = 0, refused = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          ASSIGN_OR_RETURN(auto messenger,
                           Messenger::Create(transport, store, kNs, rank, 2, Options()));
          if (rank == 1) {
            ASSIGN_OR_RETURN(Attacker attacker, Attacker::Connect(transport, store));
            RETURN_IF_ERROR(store.Get("posted", absl::Seconds(60)).status());
            const PieceHeader honest{7, 100, 0, 100};
            // Flipping before the piece's flag is up, and after.
            auto writer = rdma::testing::RacingWriter::Flipping(
                attacker.HeaderInPlace(0), 0,
                {rdma::testing::BytesOf(honest),
                 rdma::testing::BytesOf(PieceHeader{7, 100, 0, 1000}),
                 rdma::testing::BytesOf(PieceHeader{7, 100, 60, 100})});
            RETURN_IF_ERROR(attacker.Piece(0, honest));
            RETURN_IF_ERROR(store.Get("judged", absl::Seconds(60)).status());
            writer->Stop();
            // Rank 0 keeps its inbox until the writer is done with it.
            return store.Set("stopped", "1");
          }
          GuardedBuffer buffer;
          std::optional<absl::StatusOr<size_t>> outcome;
          // However this rank leaves, its inbox stays until rank 1's writer
          // has stopped writing into it.
          absl::Cleanup keep_inbox = [&] {
            store.Set("judged", "1").IgnoreError();
            store.Get("stopped", absl::Seconds(60)).IgnoreError();
          };
          RETURN_IF_ERROR(messenger->Recv(1, 7, buffer.data(), 100,
                                          [&](absl::StatusOr<size_t> got) { outcome = got; }));
          RETURN_IF_ERROR(store.Set("posted", "1"));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
          std::move(keep_inbox).Invoke();
          EXPECT_TRUE(buffer.GuardsIntact());
          if (outcome->ok()) {
            ++received;
            EXPECT_EQ(**outcome, 100u);
            for (int i = 0; i < 100; ++i) EXPECT_EQ(buffer.data()[i], 0xAB) << i;
          } else {
            ++refused;
            EXPECT_THAT(outcome->status(), StatusIs(absl::StatusCode::kDataLoss));
          }
          return absl::OkStatus();
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
  }
  RecordProperty("received", received);
  RecordProperty("refused", refused);
  EXPECT_EQ(received + refused, 20);
}

TEST(MessengerHostileTest, HugeUnexpectedMessageWaitsInsteadOfBeingAllocated) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, Options()));
        if (rank == 1) {
          ASSIGN_OR_RETURN(Attacker attacker, Attacker::Connect(transport, store));
          // 2^62 bytes (std::length_error before), then, once rank 0 has
          // looked at it, a piece that does not continue it.
          RETURN_IF_ERROR(attacker.Piece(0, {9, uint64_t{1} << 62, 0, kSlotBytes}));
          RETURN_IF_ERROR(store.Set("forged", "1"));
          RETURN_IF_ERROR(store.Get("looked", absl::Seconds(60)).status());
          RETURN_IF_ERROR(attacker.Piece(1, {9, uint64_t{1} << 62, 0, kSlotBytes}));
          return store.Get("judged", absl::Seconds(60)).status();
        }
        RETURN_IF_ERROR(store.Get("forged", absl::Seconds(60)).status());
        // The piece is visible: many passes over it buffer nothing.
        for (int i = 0; i < 1000; ++i) RETURN_IF_ERROR(messenger->Progress());
        EXPECT_EQ(messenger->stats().unexpected_messages, 0);
        EXPECT_OK(messenger->PeerStatus(1));
        // A receive for it takes it (too large for the receive: discarded).
        GuardedBuffer buffer;
        std::optional<absl::Status> outcome;
        RETURN_IF_ERROR(messenger->Recv(
            1, 9, buffer.data(), 100,
            [&](absl::StatusOr<size_t> got) { outcome = got.status(); }));
        RETURN_IF_ERROR(store.Set("looked", "1"));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        RETURN_IF_ERROR(store.Set("judged", "1"));
        EXPECT_THAT(*outcome, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("began")));
        EXPECT_TRUE(buffer.GuardsIntact());
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerHostileTest, UnexpectedMessagesBeyondTheBudgetWaitForTheirReceive) {
  // Honest peer, 3 messages of 600 KiB against a 1 MiB budget: the second
  // waits in its slot until its receive is posted; all arrive intact.
  constexpr size_t kBytes = 600 << 10;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, Options()));
        if (rank == 1) {
          std::vector<std::vector<uint8_t>> data;
          int sent = 0;
          for (uint8_t tag = 1; tag <= 3; ++tag) {
            data.emplace_back(kBytes, tag);
            RETURN_IF_ERROR(messenger->Send(0, tag, data.back().data(), kBytes,
                                            [&](absl::Status s) { sent += s.ok(); }));
          }
          return Drive(*messenger, [&] { return sent == 3; });
        }
        // Let the first arrive unexpected, then the rest stall.
        RETURN_IF_ERROR(Drive(*messenger, [&] {
          return messenger->stats().unexpected_messages == 1;
        }));
        for (int i = 0; i < 1000; ++i) RETURN_IF_ERROR(messenger->Progress());
        EXPECT_EQ(messenger->stats().unexpected_messages, 1);
        std::vector<std::vector<uint8_t>> got(4, std::vector<uint8_t>(kBytes));
        int received = 0;
        for (uint8_t tag = 3; tag >= 1; --tag) {
          RETURN_IF_ERROR(messenger->Recv(1, tag, got[tag].data(), kBytes,
                                          [&](absl::StatusOr<size_t> s) {
                                            received += s.ok() && *s == kBytes;
                                          }));
        }
        RETURN_IF_ERROR(Drive(*messenger, [&] { return received == 3; }));
        for (uint8_t tag = 1; tag <= 3; ++tag) {
          EXPECT_EQ(got[tag], std::vector<uint8_t>(kBytes, tag)) << int(tag);
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerHostileTest, ForgedCreditIsRefused) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, Options()));
        if (rank == 1) {
          ASSIGN_OR_RETURN(Attacker attacker, Attacker::Connect(transport, store));
          // Releases pieces never sent.
          RETURN_IF_ERROR(attacker.Credit(1000));
          RETURN_IF_ERROR(store.Set("forged", "1"));
          return store.Get("judged", absl::Seconds(60)).status();
        }
        RETURN_IF_ERROR(store.Get("forged", absl::Seconds(60)).status());
        uint8_t byte = 1;
        std::optional<absl::Status> outcome;
        RETURN_IF_ERROR(
            messenger->Send(1, 1, &byte, 1, [&](absl::Status s) { outcome = s; }));
        RETURN_IF_ERROR(Drive(*messenger, [&] { return outcome.has_value(); }));
        RETURN_IF_ERROR(store.Set("judged", "1"));
        EXPECT_THAT(*outcome, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("credit")));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(MessengerAbandonTest, AbandonedOperationsNeverTouchTheCallersBuffers) {
  constexpr size_t kBytes = 3000;  // three pieces
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger,
                         Messenger::Create(transport, store, kNs, rank, 2, Options()));
        if (rank == 0) {
          // A receive given up before its message came: the buffer must
          // stay as it is, and the next receive of the tag gets the next
          // message.
          GuardedBuffer abandoned;
          std::optional<absl::Status> first;
          ASSIGN_OR_RETURN(Messenger::OpId id,
                           messenger->Recv(1, 5, abandoned.data(), 100,
                                           [&](absl::StatusOr<size_t> s) {
                                             first = s.status();
                                           }));
          messenger->Abandon(id, absl::DeadlineExceededError("gave up"));
          EXPECT_THAT(first, ::testing::Optional(
                                 StatusIs(absl::StatusCode::kDeadlineExceeded)));
          EXPECT_TRUE(messenger->idle());
          std::vector<uint8_t> second(kBytes);
          std::optional<absl::StatusOr<size_t>> got;
          RETURN_IF_ERROR(messenger->Recv(1, 5, second.data(), kBytes,
                                          [&](absl::StatusOr<size_t> s) { got = s; }));
          RETURN_IF_ERROR(store.Set("abandoned", "1"));
          RETURN_IF_ERROR(Drive(*messenger, [&] { return got.has_value(); }));
          EXPECT_THAT(*got, ::rdmaflow::testing::IsOkAndHolds(kBytes));
          EXPECT_EQ(second, std::vector<uint8_t>(kBytes, 2));
          EXPECT_EQ(abandoned.bytes, GuardedBuffer().bytes);
          EXPECT_EQ(messenger->stats().abandoned, 1);
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(store.Get("abandoned", absl::Seconds(60)).status());
        // A send given up before any progress: its buffer is overwritten
        // (as freed memory would be) at once, yet the message goes out
        // whole, as it was when given up, and the link stays in step.
        auto data = std::make_unique<std::vector<uint8_t>>(kBytes, 1);
        std::optional<absl::Status> sent;
        ASSIGN_OR_RETURN(Messenger::OpId id,
                         messenger->Send(0, 5, data->data(), kBytes,
                                         [&](absl::Status s) { sent = s; }));
        messenger->Abandon(id, absl::DeadlineExceededError("gave up"));
        EXPECT_THAT(sent, ::testing::Optional(StatusIs(absl::StatusCode::kDeadlineExceeded)));
        data.reset();
        std::vector<uint8_t> next(kBytes, 2);
        int done = 0;
        RETURN_IF_ERROR(messenger->Send(0, 5, next.data(), kBytes,
                                        [&](absl::Status s) { done += s.ok(); }));
        return Drive(*messenger, [&] { return done == 1 && messenger->idle(); });
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// A zero-copy send abandoned while its writes hang, and a liveness probe of
// its peer fails while Abandon() waits for them: the probe's news fails the
// peer (which drops every message to it, the abandoned one included) in the
// middle of Abandon(). Abandon() must not touch the message after that, must
// sever the peer (cancelling the hung writes) before the caller hears, and
// the caller hears once, with its own reason. (ASan runs this suite.)
TEST(MessengerAbandonTest, APeerThatFailsWhileAnAbandonWaitsIsSeveredFirst) {
  constexpr size_t kBytes = 4096;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        const std::string ns = absl::StrCat(kNs, "/abandon_probe");
        MessengerOptions options;
        options.slot_bytes = 1024;
        options.slots = 4;
        if (rank == 1) {
          ASSIGN_OR_RETURN(auto messenger,
                           Messenger::Create(transport, store, ns, 1, 2, options));
          RETURN_IF_ERROR(rdma::Barrier(store, ns, "ready", 2, absl::Seconds(60)));
          return rdma::Barrier(store, ns, "checked", 2, absl::Seconds(60));
        }
        rdma::testing::FaultyTransport faulty(transport);
        // Writes to rank 1, and the first 4 flushes (the 4 pieces' own),
        // complete only after a million progress calls; every later flush
        // to it (the probes) fails.
        rdma::testing::FaultyTransport::Fault hang;
        hang.op = rdma::testing::FaultyTransport::Op::kWrite;
        hang.peer = 1;
        hang.count = -1;
        hang.action = rdma::testing::FaultyTransport::Action::kDelay;
        hang.delay_progress = 1000000;
        faulty.AddFault(hang);
        hang.op = rdma::testing::FaultyTransport::Op::kFlush;
        hang.count = 4;
        faulty.AddFault(hang);
        rdma::testing::FaultyTransport::Fault dead;
        dead.op = rdma::testing::FaultyTransport::Op::kFlush;
        dead.peer = 1;
        dead.count = -1;
        dead.status = absl::UnavailableError("rank 1 is gone (injected)");
        faulty.AddFault(dead);
        ProgressLoopOptions loop_options;
        loop_options.liveness_interval = absl::Milliseconds(1);
        ProgressLoop loop(faulty, loop_options);
        ASSIGN_OR_RETURN(auto links, PeerLinks::Create(faulty, store, ns, loop, {}));
        options.loop = &loop;
        options.liveness_interval = absl::Seconds(5);  // Abandon()'s wait for the writes
        ASSIGN_OR_RETURN(auto messenger, Messenger::Create(*links, 2, options));
        RETURN_IF_ERROR(rdma::Barrier(store, ns, "ready", 2, absl::Seconds(60)));
        ASSIGN_OR_RETURN(rdma::MemoryRegion region, faulty.Allocate(kBytes));
        messenger->AddSendRegion(&region);
        std::memset(region.data(), 7, kBytes);
        int fired = 0;
        absl::Status heard;
        ASSIGN_OR_RETURN(Messenger::OpId op,
                         messenger->Send(1, 3, region.data(), kBytes, [&](absl::Status s) {
                           ++fired;
                           heard = s;
                         }));
        // Rounds until a probe of rank 1 is posted: its failure comes with
        // the next progress call, which Abandon() makes.
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (loop.probes_posted() == 0 && absl::Now() < deadline) {
          RETURN_IF_ERROR(messenger->Progress());
        }
        EXPECT_GT(loop.probes_posted(), 0) << "no probe was posted";
        EXPECT_OK(messenger->PeerStatus(1));
        messenger->Abandon(op, absl::CancelledError("the test gives up"));
        EXPECT_EQ(fired, 1);
        EXPECT_THAT(heard, StatusIs(absl::StatusCode::kCancelled));
        // The probe's failure, heard during Abandon(), not its own timeout.
        EXPECT_THAT(links->PeerStatus(1),
                    StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
        EXPECT_THAT(messenger->PeerStatus(1),
                    StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
        messenger.reset();
        links.reset();
        return rdma::Barrier(store, ns, "checked", 2, absl::Seconds(60));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

}  // namespace
}  // namespace rdmaflow::onesided
