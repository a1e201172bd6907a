// The zero-copy executor against a hostile peer. Every word a peer writes
// into our memory is untrusted: the metadata of a dynamic tensor (sequence,
// byte count, source offset, writer, shape), the credit words a receiver
// writes into its sender, and notification values.
//
// First the pure checks (internal/slot_state.h) with boundary values and a
// random property test against a 128-bit reference; then an Attacker that
// joins the job through the store like a rank (it publishes what an
// executor would, so the victim's Create succeeds) and writes forged words
// with a raw endpoint: each forged value fails the victim with kDataLoss
// naming the rule, before anything is read, allocated or released; the
// victim stays failed and never crashes or hangs.
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/rendezvous.h"
#include "runtime/link_records.h"
#include "rdma/testing/raw_peer.h"
#include "runtime/executor.h"
#include "runtime/internal/slot_state.h"
#include "runtime/rank_plan.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kNs[] = "executor_hostile_test";
constexpr uint64_t kMax = ~uint64_t{0};
constexpr uint64_t kPoolBytes = 64 << 10;  // the attacker's source pool
// Two dimensions of at most 2^40 whose product is 2^64 + 16: it wraps to 16.
constexpr uint64_t kWrapA = (uint64_t{1} << 24) + 16;
constexpr uint64_t kWrapB = 1099510579201;
static_assert(kWrapB <= (uint64_t{1} << 40) && kWrapA * kWrapB == 16);

// Rank 0 produces `x` of `shape` (float32); rank 1 consumes it.
plan::TransferPlan OneTensorPlan(std::vector<int64_t> shape, int depth = 2) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, std::move(shape));
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  graph::PlannerOptions options;
  options.pipeline_depth = depth;
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), options);
  EXPECT_OK(plan.status());
  return *plan;
}

const plan::TransferPlan& DynamicPlan() {
  static const plan::TransferPlan* plan =
      new plan::TransferPlan(OneTensorPlan({-1, -1}));
  return *plan;
}

const plan::TransferPlan& StaticPlan() {
  static const plan::TransferPlan* plan = new plan::TransferPlan(OneTensorPlan({16}));
  return *plan;
}

TransferInfo DynamicInfo() {
  absl::StatusOr<RankPlan> rank_plan = RankPlan::Create(DynamicPlan(), 1);
  EXPECT_OK(rank_plan.status());
  return rank_plan->recvs().at(0);
}

CommunicatorOptions Options() {
  CommunicatorOptions options;
  options.ns = kNs;
  options.trace_steps = 0;
  options.timeout = absl::Seconds(20);  // turns a hang into a failure
  options.dynamic_pool_bytes = 1 << 20;
  return options;
}

// --- The pure checks ---------------------------------------------------------

// Metadata words: sequence + 1, bytes, source offset, writer, dims.
std::vector<uint64_t> Words(uint64_t seq1, uint64_t bytes, uint64_t offset,
                            uint64_t writer, uint64_t d0, uint64_t d1) {
  return {seq1, bytes, offset, writer, d0, d1};
}

absl::Status Check(const std::vector<uint64_t>& words, uint64_t seq = 0,
                   uint64_t pool = kPoolBytes) {
  return internal::CheckDynamicMetadata(DynamicInfo(), words, seq, pool).status();
}

TEST(ExecutorMetadataCheckTest, HonestMetadataIsAccepted) {
  ASSERT_OK_AND_ASSIGN(
      internal::DynamicMetadata m,
      internal::CheckDynamicMetadata(DynamicInfo(), Words(5, 24, 128, 0, 2, 3), 4,
                                     kPoolBytes));
  EXPECT_EQ(m.bytes, 24u);
  EXPECT_EQ(m.source_offset, 128u);
  EXPECT_EQ(m.shape, (std::vector<int64_t>{2, 3}));
  // Empty tensors, whatever the other dimension.
  EXPECT_OK(Check(Words(1, 0, 0, 0, 0, uint64_t{1} << 40)));
  EXPECT_OK(Check(Words(1, 0, kPoolBytes, 0, 7, 0)));
}

TEST(ExecutorMetadataCheckTest, SequenceMustBeExactlyTheNext) {
  EXPECT_OK(Check(Words(8, 24, 0, 0, 2, 3), 7));
  for (uint64_t seq1 : {uint64_t{0}, uint64_t{7}, uint64_t{9}, uint64_t{1} << 63, kMax}) {
    EXPECT_THAT(Check(Words(seq1, 24, 0, 0, 2, 3), 7),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr(absl::StrCat("sequence ", seq1, ", expected 8"))));
  }
}

TEST(ExecutorMetadataCheckTest, WriterMustBeTheSender) {
  for (uint64_t writer : {uint64_t{1}, uint64_t{2}, kMax}) {
    EXPECT_THAT(Check(Words(1, 24, 0, writer, 2, 3)),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr(absl::StrCat("written by rank ", writer))));
  }
}

TEST(ExecutorMetadataCheckTest, ShapeProductsThatWrapAreRefused) {
  // (2^24 + 16) * 1099510579201 elements wrap to 16 (64 bytes), 2^40 * 2^40
  // to 0: both passed CheckShape's after-the-fact bound.
  EXPECT_THAT(Check(Words(1, 64, 0, 0, kWrapA, kWrapB)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^50 elements")));
  EXPECT_THAT(Check(Words(1, 0, 0, 0, uint64_t{1} << 30, uint64_t{1} << 40)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^50 elements")));
  EXPECT_THAT(Check(Words(1, 0, 0, 0, uint64_t{1} << 40, uint64_t{1} << 40)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^50 elements")));
  // Exactly 2^50 elements is the limit; it does not fit the pool.
  EXPECT_THAT(Check(Words(1, uint64_t{1} << 52, 0, 0, uint64_t{1} << 25, uint64_t{1} << 25)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside rank 0's pool")));
  EXPECT_THAT(Check(Words(1, 0, 0, 0, (uint64_t{1} << 25) + 1, uint64_t{1} << 25)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^50 elements")));
  // A dimension above 2^40, or one that reads as negative.
  EXPECT_THAT(Check(Words(1, 0, 0, 0, (uint64_t{1} << 40) + 1, 0)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("too large")));
  EXPECT_THAT(Check(Words(1, 24, 0, 0, (uint64_t{1} << 63) + 2, 3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("got shape")));
  EXPECT_THAT(Check(Words(1, 24, 0, 0, kMax, 3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("got shape")));
}

TEST(ExecutorMetadataCheckTest, ByteCountMustBeTheShapes) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{23}, uint64_t{25}, uint64_t{1} << 63, kMax}) {
    EXPECT_THAT(Check(Words(1, bytes, 0, 0, 2, 3)),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr(absl::StrCat(bytes, " bytes for shape [2, 3]"))));
  }
}

TEST(ExecutorMetadataCheckTest, SourceRangeMustLieInThePool) {
  EXPECT_OK(Check(Words(1, 24, kPoolBytes - 24, 0, 2, 3)));  // exact fit
  EXPECT_OK(Check(Words(1, 24, 0, 0, 2, 3), 0, 24));         // the whole pool
  for (uint64_t offset : {kPoolBytes - 23, kPoolBytes, kPoolBytes + 1, kMax - 23,
                          kMax - 7, kMax}) {
    EXPECT_THAT(Check(Words(1, 24, offset, 0, 2, 3)),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr(absl::StrCat("24 bytes at source offset ", offset))));
  }
  // Larger than the pool.
  EXPECT_THAT(Check(Words(1, 4 << 20, 0, 0, 1024, 1024)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside rank 0's pool")));
  EXPECT_THAT(Check(Words(1, 24, 0, 0, 2, 3), 0, 23),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("pool of 23 bytes")));
}

// Values at and around every boundary, and random ones.
uint64_t Interesting(std::mt19937_64& rng) {
  static const uint64_t kValues[] = {0,
                                     1,
                                     2,
                                     3,
                                     24,
                                     kPoolBytes - 24,
                                     kPoolBytes - 1,
                                     kPoolBytes,
                                     kPoolBytes + 1,
                                     uint64_t{1} << 25,
                                     uint64_t{1} << 30,
                                     uint64_t{1} << 40,
                                     (uint64_t{1} << 40) + 1,
                                     uint64_t{1} << 50,
                                     uint64_t{1} << 52,
                                     uint64_t{1} << 62,
                                     uint64_t{1} << 63,
                                     kWrapA,
                                     kWrapB,
                                     kMax - 24,
                                     kMax - 1,
                                     kMax};
  switch (rng() % 4) {
    case 0:
      return kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
    case 1:
      return rng() % 64;
    case 2:
      return rng() % (2 * kPoolBytes);
    default:
      return rng();
  }
}

// What an honest sender can write, by 128-bit arithmetic.
bool ReferenceAccepts(const std::vector<uint64_t>& w, uint64_t seq, uint64_t pool) {
  using u128 = unsigned __int128;
  if (w[0] != seq + 1 || w[3] != 0) return false;
  const u128 max_dim = u128{1} << 40;
  if (w[4] > max_dim || w[5] > max_dim) return false;
  const u128 elements = u128{w[4]} * w[5];
  if (elements > (u128{1} << 50)) return false;
  const u128 bytes = elements * 4;
  return w[1] == bytes && u128{w[2]} + bytes <= pool;
}

TEST(ExecutorMetadataCheckTest, RandomWordsAcceptedExactlyWhenHonest) {
  std::mt19937_64 rng(20240611);
  const TransferInfo info = DynamicInfo();
  int accepted = 0;
  for (int i = 0; i < 300000; ++i) {
    const uint64_t seq = rng() % 4 == 0 ? Interesting(rng) : rng() % 8;
    const uint64_t pool = rng() % 2 ? kPoolBytes : Interesting(rng);
    std::vector<uint64_t> w(6);
    for (uint64_t& word : w) word = Interesting(rng);
    // Bias towards nearly honest metadata, so that acceptance is exercised.
    if (rng() % 2) w[0] = seq + 1;
    if (rng() % 2) w[3] = 0;
    if (rng() % 2) w[1] = w[4] * w[5] * 4;  // may wrap: then it must be refused
    absl::StatusOr<internal::DynamicMetadata> m =
        internal::CheckDynamicMetadata(info, w, seq, pool);
    const bool reference = ReferenceAccepts(w, seq, pool);
    ASSERT_EQ(m.ok(), reference) << "words " << w[0] << " " << w[1] << " " << w[2]
                                 << " " << w[3] << " " << w[4] << " " << w[5]
                                 << " seq " << seq << " pool " << pool << ": "
                                 << m.status();
    if (!m.ok()) {
      ASSERT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
      continue;
    }
    ++accepted;
    // What the executor then relies on.
    ASSERT_LE(m->bytes, pool);
    ASSERT_LE(m->source_offset, pool - m->bytes);
    ASSERT_EQ(m->shape.size(), 2u);
    ASSERT_GE(m->shape[0], 0);
    ASSERT_GE(m->shape[1], 0);
  }
  EXPECT_GT(accepted, 1000);
}

TEST(ExecutorCreditCheckTest, CreditsNeverGoBackNorPassWhatWasSent) {
  const TransferInfo info = DynamicInfo();
  EXPECT_OK(internal::CheckCredit(info, 0, 0, 0));
  EXPECT_OK(internal::CheckCredit(info, 5, 3, 5));
  EXPECT_THAT(internal::CheckCredit(info, 6, 3, 5),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("only 5 were sent")));
  EXPECT_THAT(internal::CheckCredit(info, kMax, 0, 5),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("only 5 were sent")));
  EXPECT_THAT(internal::CheckCredit(info, 2, 3, 5),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("of 2 after 3")));
}

TEST(ExecutorArrivalCheckTest, StagesInOrderAndWithinTheCredits) {
  const TransferInfo info = DynamicInfo();  // depth 2
  EXPECT_OK(internal::CheckArrival(info, 0, 0, 0));
  EXPECT_OK(internal::CheckArrival(info, 1, 1, 0));
  EXPECT_OK(internal::CheckArrival(info, 0, 2, 1));
  EXPECT_THAT(internal::CheckArrival(info, 1, 0, 0),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("stage 0 was due")));
  EXPECT_THAT(internal::CheckArrival(info, 0, 2, 0),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ignored the credits")));
  EXPECT_THAT(internal::CheckArrival(info, 15, 0, 0),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("stage 15")));
}

TEST(CheckShapeTest, RefusesShapesThatWrap) {
  const TransferInfo info = DynamicInfo();
  EXPECT_THAT(CheckShape(info, {int64_t{1} << 30, int64_t{1} << 40}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2^50")));
  EXPECT_THAT(CheckShape(info, {static_cast<int64_t>(kWrapA), static_cast<int64_t>(kWrapB)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2^50")));
  EXPECT_THAT(CheckShape(info, {int64_t{1} << 40, 0}),
              ::rdmaflow::testing::IsOkAndHolds(0u));
  EXPECT_THAT(CheckShape(info, {2, 3}), ::rdmaflow::testing::IsOkAndHolds(24u));
  EXPECT_THAT(CheckShape(info, {2, -3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expects")));
  EXPECT_THAT(CheckShape(info, {2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expects")));
}

// --- The attacker -------------------------------------------------------------

// A rank that joins like an executor of the one-link plan (on links of its
// own it publishes its address and its part of link 0 -> 1 of generation 0,
// with the plan's layout of it: runtime/link_records.h), then writes raw
// words into the victim's memory.
class Attacker {
 public:
  // As the sender (rank 0): publishes a credit region and a source pool
  // filled with bytes 0, 1, 2, ...; fetches the victim's receive region.
  static absl::StatusOr<std::unique_ptr<Attacker>> JoinAsSender(
      rdma::Transport& transport, rdma::Store& store, const plan::TransferPlan& plan) {
    ASSIGN_OR_RETURN(auto a, Create(transport, store));
    const plan::LinkRegion& link = plan.link(0);
    ASSIGN_OR_RETURN(rdma::MemoryRegion credit, transport.Allocate(64));
    a->own_.push_back(std::make_unique<rdma::MemoryRegion>(std::move(credit)));
    RETURN_IF_ERROR(a->links_->Publish({ExecutorLinkScope(0, link), ExecutorLinkLayout(link),
                                        {{"credit", a->own_.back().get()}}}));
    ASSIGN_OR_RETURN(rdma::MemoryRegion pool, transport.Allocate(kPoolBytes));
    for (size_t i = 0; i < kPoolBytes; ++i) pool.data()[i] = std::byte(i & 0xff);
    a->own_.push_back(std::make_unique<rdma::MemoryRegion>(std::move(pool)));
    RETURN_IF_ERROR(a->links_->Publish(
        {kExecutorPoolScope, kExecutorPoolLayout, {{"pool", a->own_.back().get()}}}));
    RETURN_IF_ERROR(a->Connect(transport, store, 1));
    ASSIGN_OR_RETURN(onesided::PeerRegions target,
                     a->links_->Fetch({ExecutorLinkScope(0, link), ExecutorLinkLayout(link),
                                       {{"recv", nullptr}}},
                                      1, "the attacker"));
    a->target_ = std::move(target.regions[0]);
    return a;
  }

  // As the receiver (rank 1): publishes a receive region for the plan's
  // link (of `region_bytes`, the plan's when 0); fetches the victim's credit
  // region.
  static absl::StatusOr<std::unique_ptr<Attacker>> JoinAsReceiver(
      rdma::Transport& transport, rdma::Store& store, const plan::TransferPlan& plan,
      uint64_t region_bytes = 0) {
    ASSIGN_OR_RETURN(auto a, Create(transport, store));
    const plan::LinkRegion& link = plan.link(0);
    ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                     transport.Allocate(region_bytes > 0 ? region_bytes : link.region_bytes()));
    a->own_.push_back(std::make_unique<rdma::MemoryRegion>(std::move(region)));
    RETURN_IF_ERROR(a->links_->Publish({ExecutorLinkScope(0, link), ExecutorLinkLayout(link),
                                        {{"recv", a->own_.back().get()}}}));
    RETURN_IF_ERROR(a->Connect(transport, store, 0));
    ASSIGN_OR_RETURN(onesided::PeerRegions target,
                     a->links_->Fetch({ExecutorLinkScope(0, link), ExecutorLinkLayout(link),
                                       {{"credit", nullptr}}},
                                      0, "the attacker"));
    a->target_ = std::move(target.regions[0]);
    return a;
  }

  // Writes `words` at `offset` of the victim's region, with `notification`.
  absl::Status Write(uint64_t offset, const std::vector<uint64_t>& words,
                     std::optional<uint32_t> notification) {
    return peer_->Write(
        target_, offset,
        absl::MakeConstSpan(reinterpret_cast<const std::byte*>(words.data()),
                            words.size() * 8),
        notification);
  }

  // Sender role: metadata for `stage` of the plan's only slot.
  absl::Status Metadata(int stage, const std::vector<uint64_t>& words) {
    const plan::LinkRegion& link = DynamicPlan().link(0);
    return Write(stage * link.stage_bytes() + link.slot(0).offset(), words,
                 internal::EncodeNotification(0, stage));
  }

  // Receiver role: the credit word of slot 0.
  absl::Status Credit(uint64_t value) { return Write(0, {value}, std::nullopt); }

  // Enters the victim's shutdown barrier and counts itself out of it at
  // once, without waiting in it (an honest peer's Shutdown would).
  static absl::Status ArriveAtShutdown(rdma::Store& store) {
    RETURN_IF_ERROR(store.Add(absl::StrCat(kNs, "/barrier/shutdown/count"), 1).status());
    return store.Add(absl::StrCat(kNs, "/barrier/shutdown/left"), 1).status();
  }

 private:
  explicit Attacker(rdma::Transport& transport)
      : loop_(std::make_unique<onesided::ProgressLoop>(transport,
                                                        onesided::ProgressLoopOptions{})) {}

  static absl::StatusOr<std::unique_ptr<Attacker>> Create(rdma::Transport& transport,
                                                          rdma::Store& store) {
    auto a = std::unique_ptr<Attacker>(new Attacker(transport));
    ASSIGN_OR_RETURN(a->links_, onesided::PeerLinks::Create(transport, store, kNs, *a->loop_, {}));
    return a;
  }
  absl::Status Connect(rdma::Transport& transport, rdma::Store& store, int victim) {
    ASSIGN_OR_RETURN(rdma::testing::RawPeer peer,
                     rdma::testing::RawPeer::Connect(transport, store, kNs, victim, 4096,
                                                     absl::Seconds(20)));
    peer_ = std::make_unique<rdma::testing::RawPeer>(std::move(peer));
    return absl::OkStatus();
  }

  std::unique_ptr<onesided::ProgressLoop> loop_;
  std::unique_ptr<onesided::PeerLinks> links_;  // publishes the address
  std::vector<std::unique_ptr<rdma::MemoryRegion>> own_;
  std::unique_ptr<rdma::testing::RawPeer> peer_;
  rdma::RemoteRegion target_;
};

struct Outcome {
  absl::Status recv;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  absl::Status again;  // a second Recv
};

// Rank 0 forges `forge(attacker)`; rank 1 (the victim) receives once.
Outcome RecvForged(const std::function<absl::Status(Attacker&)>& forge) {
  Outcome outcome;
  const plan::TransferPlan& plan = DynamicPlan();
  const int id = plan.link(0).slot(0).id();
  const std::string judged = absl::StrCat(kNs, "/judged");
  const std::string gone = absl::StrCat(kNs, "/gone");
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto attacker, Attacker::JoinAsSender(transport, store, plan));
          RETURN_IF_ERROR(forge(*attacker));
          // Keep the pool (and the transport) alive until the victim is gone.
          RETURN_IF_ERROR(store.Wait({judged}, absl::Seconds(20)));
          RETURN_IF_ERROR(Attacker::ArriveAtShutdown(store));
          return store.Wait({gone}, absl::Seconds(20));
        }
        ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
        absl::StatusOr<ReceivedTensor> got = executor->Recv(id);
        outcome.recv = got.status();
        if (got.ok()) {
          outcome.shape = got->shape();
          outcome.bytes.assign(got->data(), got->data() + got->bytes());
          *got = ReceivedTensor();
          RETURN_IF_ERROR(executor->FinishStep());
        } else {
          outcome.again = executor->Recv(id).status();
        }
        RETURN_IF_ERROR(store.Set(judged, "1"));
        // Honest: drains and meets the attacker at the barrier; failed:
        // returns at once. Either way the executor goes without hanging.
        absl::Status shutdown = executor->Shutdown();
        if (got.ok()) {
          EXPECT_OK(shutdown);
        }
        executor.reset();
        return store.Set(gone, "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return outcome;
}

TEST(ExecutorHostileTest, TheAttackerIsFaithfulHonestMetadataIsPulled) {
  Outcome outcome = RecvForged([](Attacker& a) {
    return a.Metadata(0, Words(1, 24, 128, 0, 2, 3));
  });
  ASSERT_OK(outcome.recv);
  EXPECT_EQ(outcome.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(outcome.bytes.size(), 24u);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(outcome.bytes[i], std::byte(128 + i));
}

struct ForgedCase {
  const char* what;
  std::vector<uint64_t> words;
  const char* expected;
};

TEST(ExecutorHostileTest, ForgedMetadataFailsTheReceiverWithDataLoss) {
  const uint64_t k40 = uint64_t{1} << 40;
  const std::vector<ForgedCase> cases = {
      {"sequence going back", Words(0, 24, 0, 0, 2, 3), "sequence 0, expected 1"},
      {"sequence jumping", Words(3, 24, 0, 0, 2, 3), "sequence 3, expected 1"},
      {"another writer", Words(1, 24, 0, 1, 2, 3), "written by rank 1"},
      {"size 2^63", Words(1, uint64_t{1} << 63, 0, 0, 2, 3), "bytes for shape [2, 3]"},
      {"shape product wraps to 16 elements", Words(1, 64, 0, 0, kWrapA, kWrapB),
       "more than 2^50 elements"},
      {"shape product wraps to 0", Words(1, 0, 0, 0, k40, k40), "more than 2^50 elements"},
      {"negative dimension", Words(1, 24, 0, 0, (uint64_t{1} << 63) | 2, 3), "got shape"},
      {"offset past the source pool", Words(1, 24, kPoolBytes - 8, 0, 2, 3),
       "outside rank 0's pool"},
      {"offset + size wraps", Words(1, 24, kMax - 7, 0, 2, 3), "outside rank 0's pool"},
      {"larger than the source pool", Words(1, 4 << 20, 0, 0, 1024, 1024),
       "outside rank 0's pool"},
  };
  for (const ForgedCase& c : cases) {
    SCOPED_TRACE(c.what);
    Outcome outcome = RecvForged([&](Attacker& a) { return a.Metadata(0, c.words); });
    EXPECT_THAT(outcome.recv,
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr(c.expected), HasSubstr("tensor 'x:0'"))));
    // The executor stays failed: nothing more is read from the link.
    EXPECT_THAT(outcome.again, StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST(ExecutorHostileTest, RandomMetadataIsRefusedOrPulledAsTheCheckSays) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    std::vector<uint64_t> words(6);
    for (uint64_t& w : words) w = Interesting(rng);
    words[0] = rng() % 4 ? 1 : words[0];
    words[3] = rng() % 4 ? 0 : words[3];
    if (rng() % 2) {
      words[4] %= 64;
      words[5] %= 64;
      words[1] = words[4] * words[5] * 4;
    }
    SCOPED_TRACE(absl::StrCat(words[0], " ", words[1], " ", words[2], " ", words[3],
                              " ", words[4], " ", words[5]));
    const bool honest = ReferenceAccepts(words, 0, kPoolBytes);
    Outcome outcome = RecvForged([&](Attacker& a) { return a.Metadata(0, words); });
    if (!honest) {
      EXPECT_THAT(outcome.recv, StatusIs(absl::StatusCode::kDataLoss));
      continue;
    }
    ASSERT_OK(outcome.recv);
    ASSERT_EQ(outcome.bytes.size(), words[1]);
    for (size_t b = 0; b < outcome.bytes.size(); ++b) {
      ASSERT_EQ(outcome.bytes[b], std::byte((words[2] + b) & 0xff));
    }
  }
}

TEST(ExecutorHostileTest, ForgedNotificationsFailTheReceiver) {
  struct Case {
    const char* what;
    std::vector<uint32_t> notifications;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"a slot the plan does not have", {99u << 4}, "which its plan does not have"},
      {"a stage not due", {1}, "stage 1 where stage 0 was due"},
      // Depth 2, nothing released: a third write overran the credits.
      {"writes past the credits", {0, 1, 0}, "ignored the credits"},
  };
  const plan::TransferPlan& plan = StaticPlan();
  const int id = plan.link(0).slot(0).id();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::Status recv;
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          if (rank == 0) {
            ASSIGN_OR_RETURN(auto attacker, Attacker::JoinAsSender(transport, store, plan));
            for (uint32_t n : c.notifications) {
              RETURN_IF_ERROR(attacker->Write(0, std::vector<uint64_t>(8, 7), n));
            }
            RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/forged"), "1"));
            return store.Wait({absl::StrCat(kNs, "/judged")}, absl::Seconds(20));
          }
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
          // Every forged notification is queued before the first poll.
          RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/forged")}, absl::Seconds(20)));
          recv = executor->Recv(id).status();
          return store.Set(absl::StrCat(kNs, "/judged"), "1");
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
    EXPECT_THAT(recv, StatusIs(absl::StatusCode::kDataLoss, HasSubstr(c.expected)));
  }
}

// Rank 1 publishes the honest layout of the link with a receive region of
// one line: the victim's set-up refuses it, naming rank 1 and the sizes,
// before anything is written (not at the first post).
TEST(ExecutorHostileTest, AReceiveRegionShorterThanThePlanIsRefusedAtSetUp) {
  const plan::TransferPlan& plan = StaticPlan();
  ASSERT_GT(plan.link(0).region_bytes(), 64u);
  absl::Status created;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          auto attacker =
              Attacker::JoinAsReceiver(transport, store, plan, /*region_bytes=*/64);
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/joined"), "1"));
          RETURN_IF_ERROR(attacker.status());
          return store.Wait({absl::StrCat(kNs, "/judged")}, absl::Seconds(20));
        }
        created = Executor::Create(plan, transport, store, Options()).status();
        // The attacker connects to this rank and fetches its records while
        // it joins, which may end after the refusal: keep this rank's
        // transport up until it has.
        RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/joined")}, absl::Seconds(20)));
        return store.Set(absl::StrCat(kNs, "/judged"), "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_THAT(created, StatusIs(absl::StatusCode::kDataLoss,
                                ::testing::AllOf(HasSubstr("rank 1 published its receive region "
                                                           "of 64 bytes"),
                                                 HasSubstr("the executor of rank 0"))));
}

// The victim sends; rank 1 writes its credit word.
TEST(ExecutorHostileTest, ForgedCreditsFailTheSender) {
  const plan::TransferPlan& plan = StaticPlan();
  const int id = plan.link(0).slot(0).id();
  std::vector<std::byte> data(64, std::byte{1});
  auto send = [&](Executor& executor) {
    return executor.Send(id, {data.data(), data.size(), {16}, nullptr});
  };
  // Releasing more than was sent.
  {
    absl::Status sent;
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          if (rank == 1) {
            ASSIGN_OR_RETURN(auto attacker,
                             Attacker::JoinAsReceiver(transport, store, plan));
            RETURN_IF_ERROR(attacker->Credit(1000));
            RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/forged"), "1"));
            return store.Wait({absl::StrCat(kNs, "/judged")}, absl::Seconds(20));
          }
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, Options()));
          RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/forged")}, absl::Seconds(20)));
          sent = send(*executor);
          for (int step = 0; step < 3 && sent.ok(); ++step) {
            sent = executor->FinishStep();
            if (sent.ok()) sent = send(*executor);
          }
          return store.Set(absl::StrCat(kNs, "/judged"), "1");
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
    EXPECT_THAT(sent, StatusIs(absl::StatusCode::kDataLoss,
                               ::testing::AllOf(HasSubstr("rank 1 wrote a credit releasing 1000"),
                                                HasSubstr("tensor 'x:0'"))));
  }
  // Going back: 1 after step 0, then 0.
  {
    absl::Status sent;
    std::vector<absl::Status> results = rdma::testing::RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          if (rank == 1) {
            ASSIGN_OR_RETURN(auto attacker,
                             Attacker::JoinAsReceiver(transport, store, plan));
            RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/sent0")}, absl::Seconds(20)));
            RETURN_IF_ERROR(attacker->Credit(1));
            RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/released"), "1"));
            RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/sent1")}, absl::Seconds(20)));
            RETURN_IF_ERROR(attacker->Credit(0));
            RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/forged"), "1"));
            return store.Wait({absl::StrCat(kNs, "/judged")}, absl::Seconds(20));
          }
          CommunicatorOptions options = Options();
          options.timeout = absl::Seconds(2);  // fails fast where the check is missing
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, options));
          RETURN_IF_ERROR(send(*executor));
          RETURN_IF_ERROR(executor->FinishStep());
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/sent0"), "1"));
          RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/released")}, absl::Seconds(20)));
          RETURN_IF_ERROR(send(*executor));  // sees credit 1
          RETURN_IF_ERROR(executor->FinishStep());
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/sent1"), "1"));
          RETURN_IF_ERROR(store.Wait({absl::StrCat(kNs, "/forged")}, absl::Seconds(20)));
          sent = send(*executor);
          return store.Set(absl::StrCat(kNs, "/judged"), "1");
        });
    for (const absl::Status& status : results) EXPECT_OK(status);
    EXPECT_THAT(sent, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("of 0 after 1")));
  }
}

}  // namespace
}  // namespace rdmaflow::runtime
