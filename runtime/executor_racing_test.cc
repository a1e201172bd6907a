// File: executor_racing_test.cc
// The executor's readers of peer-written words against a peer that rewrites
// them while they are read (rdma/testing/racing_writer.h): a dynamic
// tensor's metadata slot (sequence, bytes, source offset, writer, shape) in
// the receiver's region, as Recv reads it (internal::ReadDynamicMetadata),
// and the credit word a receiver writes into its sender, as every progress
// round reads it (internal::RefreshCredit). Each is copied once and only
// the copy is checked and used: an accepted answer is consistent (its bytes
// are its shape's), its source range lies inside the pool, and each of its
// fields holds a value the writer wrote (never a value no write held); a
// refusal is kDataLoss quoting a value that was written. One copy of a
// record being rewritten may still mix fields of two successive writes (a
// reader preempted mid-copy while the writer finishes one): such a mix is
// the writer's own values, checked like any other.
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "rdma/testing/racing_writer.h"
#include "runtime/internal/slot_state.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::rdma::testing::Add;
using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::QuotedAfter;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RaceUntilBothEndings;
using ::rdmaflow::rdma::testing::RacingWriter;

constexpr uint64_t kPoolBytes = 64 << 10;  // the sender's source pool

// Rank 0 produces `x` of `shape` (float32); rank 1 consumes it.
plan::TransferPlan OneTensorPlan(std::vector<int64_t> shape) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, std::move(shape));
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_OK(plan.status());
  return *plan;
}

// The transfer as rank 1 receives it, or as rank 0 sends it.
TransferInfo InfoOf(const plan::TransferPlan& plan, int rank) {
  absl::StatusOr<RankPlan> rank_plan = RankPlan::Create(plan, rank);
  EXPECT_OK(rank_plan.status());
  return rank == 0 ? rank_plan->sends().at(0) : rank_plan->recvs().at(0);
}

void ExpectValidOrDataLoss(const RaceTally& tally) {
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.ok, 0);
  EXPECT_GT(tally.data_loss, 0);
  ::testing::Test::RecordProperty("calls", static_cast<int>(tally.calls));
  ::testing::Test::RecordProperty("refused", static_cast<int>(tally.data_loss));
  ::testing::Test::RecordProperty("writer_rounds", static_cast<int>(tally.writer_rounds));
}

// --- Metadata ----------------------------------------------------------------

// Metadata words of rank 0's tensor 0 of float32[-1, -1]: sequence + 1,
// bytes, source offset, writer, dims.
struct Metadata {
  uint64_t words[6];
};
Metadata Words(uint64_t seq1, uint64_t bytes, uint64_t offset, uint64_t d0, uint64_t d1) {
  return {{seq1, bytes, offset, 0, d0, d1}};
}

class ExecutorMetadataRacingTest : public ::testing::Test {
 protected:
  ExecutorMetadataRacingTest()
      : info_(InfoOf(OneTensorPlan({-1, -1}), 1)), slot_(sizeof(Metadata)) {}

  // One read of the slot as Recv reads it: an accepted one must be inside
  // the pool, its bytes its shape's, and its bytes, source offset and shape
  // each one of `written`'s; a refused one kDataLoss naming rank 0.
  absl::Status ReadOnce(const std::vector<Metadata>& written) {
    absl::StatusOr<internal::DynamicMetadata> m =
        internal::ReadDynamicMetadata(info_, slot_.data(), 0, kPoolBytes);
    if (!m.ok()) {
      if (m.status().code() == absl::StatusCode::kDataLoss &&
          m.status().message().find("the metadata rank 0 wrote") == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("a refusal naming no writer: ",
                                                m.status().ToString()));
      }
      return m.status();
    }
    if (m->bytes > kPoolBytes || m->source_offset > kPoolBytes - m->bytes) {
      return absl::InternalError(absl::StrCat("accepted ", m->bytes, " bytes at ",
                                              m->source_offset, ", outside the pool"));
    }
    if (m->shape.size() != 2 ||
        m->bytes != static_cast<uint64_t>(m->shape[0] * m->shape[1]) * sizeof(float)) {
      return absl::InternalError(absl::StrCat("accepted ", m->bytes, " bytes for a shape of ",
                                              m->shape.size(), " dimensions that holds others"));
    }
    bool bytes = false, offset = false, shape = false;
    for (const Metadata& w : written) {
      bytes |= m->bytes == w.words[1];
      offset |= m->source_offset == w.words[2];
      shape |= m->shape == std::vector<int64_t>{static_cast<int64_t>(w.words[4]),
                                                static_cast<int64_t>(w.words[5])};
    }
    if (bytes && offset && shape) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("accepted ", m->bytes, " bytes at ",
                                            m->source_offset, " for shape [", m->shape[0], ", ",
                                            m->shape[1], "], a value no write held"));
  }

  std::unique_ptr<RacingWriter> Flip(const std::vector<Metadata>& images,
                                     RacingWriter::Tearing tearing) {
    std::vector<std::vector<std::byte>> bytes;
    for (const Metadata& image : images) bytes.push_back(BytesOf(image));
    return RacingWriter::Flipping(absl::MakeSpan(slot_), 0, std::move(bytes), tearing);
  }

  TransferInfo info_;
  std::vector<std::byte> slot_;
};

// Two honest slots that differ in bytes, offset and shape, and two forged
// ones (a source range past the pool, a repeated sequence), words landing
// whole, in order. Whatever a read accepts is consistent, inside the pool,
// and made of values written (the file's header says why a copy
// may mix two writes); the rest is kDataLoss.
TEST_F(ExecutorMetadataRacingTest, ASlotFlippingBetweenWholeWritesIsCheckedAsCopied) {
  const Metadata a = Words(1, 24, 128, 2, 3);
  const Metadata b = Words(1, 32, 4096, 2, 4);
  const Metadata past_pool = Words(1, 32, kPoolBytes - 16, 2, 4);
  const Metadata repeated = Words(9, 32, 4096, 2, 4);
  const RaceTally tally = RaceUntilBothEndings(
      [&] { return Flip({a, b, past_pool, repeated}, RacingWriter::Tearing::kWords); },
      [&] { return ReadOnce({a, b, past_pool, repeated}); });
  ExpectValidOrDataLoss(tally);
}

// The source offset torn byte by byte between 256 and 2^40 + 128: a load
// may see any mix of their bytes (0, 128, 256, 384, each also + 2^40); only
// those inside the pool, with the bytes and shape never rewritten, may be
// taken.
TEST_F(ExecutorMetadataRacingTest, ATornSourceOffsetIsInsideThePoolOrRefused) {
  const uint64_t far = (uint64_t{1} << 40) + 128;
  std::vector<Metadata> honest;
  for (uint64_t offset : {0, 128, 256, 384}) honest.push_back(Words(1, 24, offset, 2, 3));
  const Metadata start = Words(1, 24, 256, 2, 3);
  std::memcpy(slot_.data(), &start, sizeof(Metadata));
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(absl::MakeSpan(slot_), 2 * sizeof(uint64_t),
                                      {BytesOf(uint64_t{256}), BytesOf(far)});
      },
      [&] { return ReadOnce(honest); });
  ExpectValidOrDataLoss(tally);
}

// Random bytes over the whole slot: whatever a read accepts lies inside the
// pool and its bytes are its shape's. Raced again (a fresh writer) until a
// read met a scribbled slot.
TEST_F(ExecutorMetadataRacingTest, AScribbledSlotIsCheckedAsCopied) {
  RaceTally total;
  for (uint64_t seed = 41; seed < 61 && total.data_loss == 0; ++seed) {
    const Metadata start = Words(1, 24, 128, 2, 3);
    std::memcpy(slot_.data(), &start, sizeof(Metadata));
    auto writer = RacingWriter::Scribbling(absl::MakeSpan(slot_), 0, slot_.size(), seed);
    Add(total, RaceParse(*writer, [&]() -> absl::Status {
      absl::StatusOr<internal::DynamicMetadata> m =
          internal::ReadDynamicMetadata(info_, slot_.data(), 0, kPoolBytes);
      if (!m.ok()) return m.status();
      if (m->bytes > kPoolBytes || m->source_offset > kPoolBytes - m->bytes ||
          m->shape.size() != 2 || m->shape[0] < 0 || m->shape[1] < 0 ||
          static_cast<uint64_t>(m->shape[0] * m->shape[1] * 4) != m->bytes) {
        return absl::InternalError(absl::StrCat("accepted ", m->bytes, " bytes at ",
                                                m->source_offset));
      }
      return absl::OkStatus();
    }));
  }
  EXPECT_EQ(total.other, 0) << total.first_other;
  EXPECT_EQ(total.ok + total.data_loss, total.calls);
  EXPECT_GT(total.data_loss, 0);
}

// --- Credits -----------------------------------------------------------------

// Rank 0 has sent 3 tensors of its float32[16] (depth 2). The credit word
// rank 1 writes flips between 2 and 3 (honest counts; 2 after 3 goes back),
// 7 (releasing tensors never sent) and 2^64 - 1. Eight rounds of
// RefreshCredit: every count taken is one that was written, within what
// was sent and never below the last; a refusal is kDataLoss quoting an
// unacceptable written value and naming rank 1, and leaves the count flow
// control uses as it was.
class ExecutorCreditRacingTest : public ::testing::Test {
 protected:
  ExecutorCreditRacingTest() : info_(InfoOf(OneTensorPlan({16}), 0)) {}

  absl::Status PollCredits(const std::set<uint64_t>& written) {
    internal::SendSlot slot;
    slot.info = info_;
    slot.credit = &word_;
    slot.next_seq = 3;
    for (int round = 0; round < 8; ++round) {
      const uint64_t before = slot.credit_seen;
      absl::Status status = internal::RefreshCredit(slot);
      const uint64_t credit = slot.credit_seen;
      if (status.ok()) {
        if (credit > slot.next_seq || credit < before || written.count(credit) == 0) {
          return absl::InternalError(absl::StrCat("took a credit of ", credit, " after ",
                                                  before, " with 3 sent"));
        }
        continue;
      }
      if (status.code() != absl::StatusCode::kDataLoss) return status;
      if (credit != before) {
        return absl::InternalError(absl::StrCat("a refused credit moved the count to ", credit));
      }
      const std::string message(status.message());
      std::optional<uint64_t> quoted = QuotedAfter(message, "rank 1 wrote a credit of ");
      if (!quoted.has_value()) quoted = QuotedAfter(message, "rank 1 wrote a credit releasing ");
      if (!quoted.has_value() || written.count(*quoted) == 0 ||
          (*quoted <= slot.next_seq && *quoted >= before)) {
        return absl::InternalError(absl::StrCat("refused quoting an acceptable value: ", message));
      }
      return status;
    }
    return absl::OkStatus();
  }

  TransferInfo info_;
  alignas(8) uint64_t word_ = 0;
};

TEST_F(ExecutorCreditRacingTest, ACreditFlippingWithForgedOnesIsCheckedAsLoaded) {
  const uint64_t values[] = {2, 3, 7, ~uint64_t{0}};
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(
            absl::MakeSpan(reinterpret_cast<std::byte*>(&word_), sizeof(word_)), 0,
            {BytesOf(values[0]), BytesOf(values[1]), BytesOf(values[2]), BytesOf(values[3])},
            RacingWriter::Tearing::kWords);
      },
      [&] { return PollCredits({0, 2, 3, 7, ~uint64_t{0}}); });
  ExpectValidOrDataLoss(tally);
}

// Torn byte by byte between 3 and 2^40 + 2: a load may see 2, 3, 2^40 + 2
// or 2^40 + 3; the last two release tensors never sent.
TEST_F(ExecutorCreditRacingTest, ATornCreditIsRefusedOrHonest) {
  const uint64_t high = (uint64_t{1} << 40) + 2;
  const RaceTally tally = RaceUntilBothEndings(
      [&] {
        return RacingWriter::Flipping(
            absl::MakeSpan(reinterpret_cast<std::byte*>(&word_), sizeof(word_)), 0,
            {BytesOf(uint64_t{3}), BytesOf(high)});
      },
      [&] { return PollCredits({0, 2, 3, high, high + 1}); });
  ExpectValidOrDataLoss(tally);
}

}  // namespace
}  // namespace rdmaflow::runtime
