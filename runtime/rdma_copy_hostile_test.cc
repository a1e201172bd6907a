// The rdma_copy baseline against a hostile sender: rank 0 joins like an
// rdma_copy rank (its address and its side of the slot link, published
// through its own links), then writes forged messages (length word,
// TensorChunk header, payload) into rank 1's message ring and raises their
// flags, as a buggy or malicious peer could. Each forged chunk (offset +
// size wrapping, larger than the tensor or a slot, a continuation of
// nothing, a total that is not the shape's, an undecodable header, a flag
// that is not the message's, a dynamic tensor beyond the pool) fails rank
// 1's Recv with a named error before a byte is copied or allocated, and
// rank 1 never crashes or hangs. In the other direction, a receiver that
// writes a forged credit (releasing messages never sent) fails the honest
// sender's Send.
#include <cstring>
#include <memory>
#include <optional>
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
#include "onesided/slots/slot_link.h"
#include "rdma/rendezvous.h"
#include "runtime/link_records.h"
#include "rdma/testing/raw_peer.h"
#include "runtime/rdma_copy_communicator.h"
#include "runtime/tensor_message.pb.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "rdma_copy_hostile_test";
constexpr int kRingSlots = 4;
constexpr size_t kChunkBytes = 64;
// The wire layout of rdma_copy_communicator.cc: a slot is the chunk plus 512
// bytes of room for the 4-byte length word and the serialized header.
constexpr size_t kSlotBytes = kChunkBytes + 512;
constexpr uint64_t kMax = ~uint64_t{0};

// The layout an rdma_copy of CopyOptions() publishes (link_records.h).
std::string Layout() { return RdmaCopyLayout(kRingSlots, kSlotBytes); }

// The ring of messages one way of a link (rdma_copy_communicator.cc).
onesided::SlotRingShape Messages() { return {"messages", kRingSlots, kSlotBytes, true}; }

// Joins rank `rank` to its slot link with the other rank through links of
// its own, as an honest rdma_copy would: a ring of messages from rank 0 to
// rank 1. The links (and their loop) must outlive the link.
struct HonestLink {
  std::unique_ptr<onesided::ProgressLoop> loop;
  std::unique_ptr<onesided::PeerLinks> links;
  std::unique_ptr<onesided::SlotLink> link;
};
absl::StatusOr<HonestLink> JoinLink(int rank, rdma::Transport& transport, rdma::Store& store) {
  HonestLink joined;
  joined.loop =
      std::make_unique<onesided::ProgressLoop>(transport, onesided::ProgressLoopOptions{});
  ASSIGN_OR_RETURN(joined.links,
                   onesided::PeerLinks::Create(transport, store, kNs, *joined.loop, {}));
  onesided::SlotLinkOptions options;
  options.scope = kRdmaCopyScope;
  options.layout = Layout();
  options.peer = 1 - rank;
  (rank == 0 ? options.out : options.in).push_back(Messages());
  ASSIGN_OR_RETURN(joined.link, onesided::SlotLink::Create(*joined.links, std::move(options)));
  RETURN_IF_ERROR(joined.link->Connect("the attacker"));
  return joined;
}

// The published region of rank `rank`'s side of the link, and its layout.
absl::StatusOr<rdma::RemoteRegion> LinkRegionOf(rdma::Store& store, int rank) {
  return rdma::FetchRegion(store, kNs, absl::StrCat(kRdmaCopyScope, "/link/0-1/", rank, "/link"),
                           absl::Seconds(20));
}

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

RdmaCopyOptions CopyOptions() {
  RdmaCopyOptions options;
  options.ring_slots = kRingSlots;
  options.chunk_bytes = kChunkBytes;
  return options;
}

CommunicatorOptions Options() {
  CommunicatorOptions options;
  options.ns = kNs;
  options.trace_steps = 0;
  options.timeout = absl::Seconds(20);  // turns a hang into a failure
  options.dynamic_pool_bytes = 1 << 20;
  return options;
}

// One forged message: the length word (normally the header's size), the
// header bytes, the payload, and the slot's flag (normally the message's
// number + 1).
struct Message {
  std::optional<uint32_t> length;  // default: header.size()
  std::string header;
  size_t payload = 0;
  std::optional<uint64_t> flag;  // default: the message's number + 1
};

Message Chunk(int id, int64_t step, std::vector<int64_t> shape, uint64_t total,
              uint64_t offset, uint64_t chunk) {
  TensorChunk header;
  header.set_id(id);
  header.set_step(step);
  for (int64_t d : shape) header.add_shape(d);
  header.set_total_bytes(total);
  header.set_offset(offset);
  header.set_chunk_bytes(chunk);
  Message m;
  m.header = header.SerializeAsString();
  m.payload = std::min<uint64_t>(chunk, kChunkBytes);
  return m;
}

// Rank 0 as the victim sees it: joins the link as an rdma_copy sender
// would, then writes raw messages into the victim's ring.
class Attacker {
 public:
  static absl::StatusOr<std::unique_ptr<Attacker>> Join(rdma::Transport& transport,
                                                        rdma::Store& store) {
    auto a = std::make_unique<Attacker>();
    ASSIGN_OR_RETURN(a->link_, JoinLink(0, transport, store));
    ASSIGN_OR_RETURN(rdma::testing::RawPeer peer,
                     rdma::testing::RawPeer::Connect(transport, store, kNs, 1, kSlotBytes,
                                                     absl::Seconds(20)));
    a->peer_ = std::make_unique<rdma::testing::RawPeer>(std::move(peer));
    ASSIGN_OR_RETURN(a->ring_, LinkRegionOf(store, 1));
    // The victim's side: the ring of messages comes in.
    ASSIGN_OR_RETURN(a->layout_, onesided::SlotLinkLayout::Create({Messages()}, {}));
    return a;
  }

  // Writes `m` into the next slot of the ring, then raises its flag.
  absl::Status Send(const Message& m) {
    const uint64_t seq = next_++;
    const uint64_t slot = seq % kRingSlots;
    const uint32_t length = m.length.value_or(static_cast<uint32_t>(m.header.size()));
    const size_t bytes = std::min(kSlotBytes, 4 + m.header.size() + m.payload);
    std::vector<std::byte> message(bytes);
    std::memcpy(message.data(), &length, 4);
    std::memcpy(message.data() + 4, m.header.data(),
                std::min(m.header.size(), bytes - 4));
    for (size_t i = 4 + m.header.size(); i < bytes; ++i) {
      message[i] = std::byte((i - 4 - m.header.size()) & 0xff);
    }
    RETURN_IF_ERROR(peer_->Write(ring_, layout_->staging(0) + slot * kSlotBytes, message));
    return peer_->WriteWord(ring_, layout_->flags(0) + slot * onesided::kSlotWordBytes,
                            m.flag.value_or(seq + 1));
  }

  // Enters the victim's shutdown barrier and counts itself out of it at
  // once, without waiting in it (an honest peer's Shutdown would).
  static absl::Status ArriveAtShutdown(rdma::Store& store) {
    RETURN_IF_ERROR(store.Add(absl::StrCat(kNs, "/barrier/shutdown/count"), 1).status());
    return store.Add(absl::StrCat(kNs, "/barrier/shutdown/left"), 1).status();
  }

 private:
  HonestLink link_;
  std::unique_ptr<rdma::testing::RawPeer> peer_;
  rdma::RemoteRegion ring_;
  std::optional<onesided::SlotLinkLayout> layout_;
  uint64_t next_ = 0;
};

struct Outcome {
  absl::Status recv;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  absl::Status again;  // a Ready() after a failure
};

// Rank 0 sends `messages`; rank 1 (the victim) receives the plan's tensor.
Outcome RecvForged(const plan::TransferPlan& plan, const std::vector<Message>& messages) {
  Outcome outcome;
  const int id = plan.link(0).slot(0).id();
  const std::string judged = absl::StrCat(kNs, "/judged");
  const std::string gone = absl::StrCat(kNs, "/gone");
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto attacker, Attacker::Join(transport, store));
          for (const Message& m : messages) RETURN_IF_ERROR(attacker->Send(m));
          RETURN_IF_ERROR(store.Wait({judged}, absl::Seconds(20)));
          RETURN_IF_ERROR(Attacker::ArriveAtShutdown(store));
          return store.Wait({gone}, absl::Seconds(20));
        }
        ASSIGN_OR_RETURN(auto copy, RdmaCopyCommunicator::Create(plan, transport, store,
                                                                 Options(), CopyOptions()));
        absl::StatusOr<ReceivedTensor> got = copy->Recv(id);
        outcome.recv = got.status();
        if (got.ok()) {
          outcome.shape = got->shape();
          outcome.bytes.assign(got->data(), got->data() + got->bytes());
          RETURN_IF_ERROR(copy->FinishStep());
        } else {
          outcome.again = copy->Ready(id).status();
        }
        RETURN_IF_ERROR(store.Set(judged, "1"));
        absl::Status shutdown = copy->Shutdown();
        if (got.ok()) {
          EXPECT_OK(shutdown);
        }
        copy.reset();
        return store.Set(gone, "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return outcome;
}

const plan::TransferPlan& StaticPlan() {  // float32[40]: 160 bytes, 3 chunks
  static const plan::TransferPlan* plan = new plan::TransferPlan(OneTensorPlan({40}));
  return *plan;
}
const plan::TransferPlan& DynamicPlan() {  // float32[-1, -1]
  static const plan::TransferPlan* plan = new plan::TransferPlan(OneTensorPlan({-1, -1}));
  return *plan;
}
int StaticId() { return StaticPlan().link(0).slot(0).id(); }
int DynamicId() { return DynamicPlan().link(0).slot(0).id(); }

TEST(RdmaCopyHostileTest, TheAttackerIsFaithfulHonestChunksAreAssembled) {
  const int id = StaticId();
  Outcome outcome = RecvForged(StaticPlan(), {Chunk(id, 0, {40}, 160, 0, 64),
                                              Chunk(id, 0, {40}, 160, 64, 64),
                                              Chunk(id, 0, {40}, 160, 128, 32)});
  ASSERT_OK(outcome.recv);
  EXPECT_EQ(outcome.shape, (std::vector<int64_t>{40}));
  ASSERT_EQ(outcome.bytes.size(), 160u);
  for (size_t i = 0; i < 160; ++i) EXPECT_EQ(outcome.bytes[i], std::byte((i % 64) & 0xff));
}

struct ForgedCase {
  const char* what;
  const plan::TransferPlan* plan;
  std::vector<Message> messages;
  absl::StatusCode code;
  std::string expected;
};

TEST(RdmaCopyHostileTest, ForgedChunksFailTheReceiver) {
  const int s = StaticId();
  const int d = DynamicId();
  Message too_long = Chunk(s, 0, {40}, 160, 0, 64);
  too_long.length = 100000;
  Message garbage;  // field 1 with wire type 7: no such wire type
  garbage.header = std::string("\x0f\x01\x02\x03", 4);
  Message a_lap_ahead = Chunk(s, 0, {40}, 160, 0, 64);
  a_lap_ahead.flag = 1 + kRingSlots;
  Message huge_flag = Chunk(s, 0, {40}, 160, 0, 64);
  huge_flag.flag = kMax;
  const std::vector<ForgedCase> cases = {
      {"offset + size wraps", &StaticPlan(),
       {Chunk(s, 0, {40}, 160, 0, 64), Chunk(s, 0, {40}, 160, kMax - 10, 64)},
       absl::StatusCode::kDataLoss, "under way"},
      {"a chunk of 2^64 - 1 bytes", &StaticPlan(), {Chunk(s, 0, {40}, 160, 0, kMax)},
       absl::StatusCode::kDataLoss, "larger than a slot"},
      {"a chunk larger than the tensor", &StaticPlan(),
       {Chunk(s, 0, {40}, 160, 0, 64), Chunk(s, 0, {40}, 160, 64, 64),
        Chunk(s, 0, {40}, 160, 128, 64)},
       absl::StatusCode::kDataLoss, "should have 32 bytes"},
      {"a chunk larger than a one-chunk tensor", &DynamicPlan(),
       {Chunk(d, 0, {2, 3}, 24, 0, 64)}, absl::StatusCode::kDataLoss,
       "should have 24 bytes"},
      {"a continuation before the start", &StaticPlan(), {Chunk(s, 0, {40}, 160, 64, 64)},
       absl::StatusCode::kDataLoss, "continues no message"},
      {"a restart in the middle", &StaticPlan(),
       {Chunk(s, 0, {40}, 160, 0, 64), Chunk(s, 0, {40}, 160, 0, 64)},
       absl::StatusCode::kDataLoss, "new message began"},
      {"a total that is not the shape's", &StaticPlan(), {Chunk(s, 0, {40}, 100, 0, 64)},
       absl::StatusCode::kDataLoss, "message of 100 bytes for shape of 160"},
      {"a shape the plan does not have", &StaticPlan(), {Chunk(s, 0, {41}, 164, 0, 64)},
       absl::StatusCode::kDataLoss, "expects float32[40]"},
      {"a negative dimension", &DynamicPlan(), {Chunk(d, 0, {-2, -3}, 24, 0, 24)},
       absl::StatusCode::kDataLoss, "got shape"},
      {"a dynamic tensor beyond the pool", &DynamicPlan(),
       {Chunk(d, 0, {1024, 1024}, 4 << 20, 0, 64)}, absl::StatusCode::kDataLoss,
       "more than dynamic_pool_bytes"},
      {"a dynamic tensor of 2^62 bytes", &DynamicPlan(),
       {Chunk(d, 0, {int64_t{1} << 30, int64_t{1} << 30}, uint64_t{1} << 62, 0, 64)},
       absl::StatusCode::kDataLoss, "more than 2^50 elements"},
      {"an undecodable header (length past its room)", &StaticPlan(), {too_long},
       absl::StatusCode::kDataLoss, "undecodable message header from rank 0"},
      {"an undecodable header (garbage)", &StaticPlan(), {garbage},
       absl::StatusCode::kDataLoss, "undecodable message header from rank 0"},
      {"a flag a lap ahead", &StaticPlan(), {a_lap_ahead}, absl::StatusCode::kDataLoss,
       absl::StrCat("rank 0 wrote ", 1 + kRingSlots, " into the flag of slot 0 where 1")},
      {"a flag of 2^64 - 1", &StaticPlan(), {huge_flag}, absl::StatusCode::kDataLoss,
       absl::StrCat("rank 0 wrote ", kMax, " into the flag of slot 0")},
      {"a step from the future", &StaticPlan(), {Chunk(s, 5, {40}, 160, 0, 64),
                                                 Chunk(s, 5, {40}, 160, 64, 64),
                                                 Chunk(s, 5, {40}, 160, 128, 32)},
       absl::StatusCode::kDataLoss, "tensor 5 arrived as tensor 0"},
  };
  for (const ForgedCase& c : cases) {
    SCOPED_TRACE(c.what);
    Outcome outcome = RecvForged(*c.plan, c.messages);
    EXPECT_THAT(outcome.recv, StatusIs(c.code, HasSubstr(c.expected)));
    // The communicator stays failed, except after a step mismatch (found
    // by Recv, not by the engine).
    if (c.code != absl::StatusCode::kDataLoss ||
        c.expected.find("arrived as") == std::string::npos) {
      EXPECT_THAT(outcome.again, StatusIs(c.code));
    }
  }
}

TEST(RdmaCopyHostileTest, AChunkOfAnIdTheReceiverDoesNotHaveIsAnError) {
  Outcome outcome = RecvForged(StaticPlan(), {Chunk(999, 0, {40}, 160, 0, 64)});
  EXPECT_THAT(outcome.recv, StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("999"), HasSubstr("rank 1"))));
}

// [2^24 + 16, 1099510579201] is 2^64 + 16 elements: a product formed
// before it is bounded would wrap to 16 and accept a 64-byte message.
// CheckShape (rank_plan.cc) bounds it before each product.
TEST(RdmaCopyHostileTest, AShapeWhoseProductWrapsIsRefused) {
  const int d = DynamicId();
  Outcome outcome = RecvForged(
      DynamicPlan(), {Chunk(d, 0, {(int64_t{1} << 24) + 16, 1099510579201}, 64, 0, 64)});
  EXPECT_THAT(outcome.recv, StatusIs(absl::StatusCode::kDataLoss));
}

// Two ends of a link with rings of other sizes would misread each other's
// slots: both stop at set-up, quoting both layouts.
TEST(RdmaCopyHostileTest, RingsLaidOutOtherwiseAreRefusedAtSetUp) {
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        RdmaCopyOptions copy = CopyOptions();
        copy.ring_slots = rank == 0 ? kRingSlots : 2 * kRingSlots;
        CommunicatorOptions options = Options();
        options.ns = "rings_laid_out_otherwise";
        return RdmaCopyCommunicator::Create(StaticPlan(), transport, store, options, copy)
            .status();
      });
  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 AllOf(HasSubstr("rdma_copy of rank"),
                                       HasSubstr(absl::StrCat("ring_slots=", kRingSlots)),
                                       HasSubstr(absl::StrCat("ring_slots=", 2 * kRingSlots)))));
  }
}

// A tensor whose header does not fit a slot's room (600 dimensions of 1:
// the shape alone is 600 bytes of header) is refused by the sender with a
// clear error before anything is claimed or written, instead of
// overflowing into the next slot.
TEST(RdmaCopyHostileTest, AHeaderLargerThanItsRoomIsRefusedBySend) {
  const plan::TransferPlan plan = OneTensorPlan(std::vector<int64_t>(600, 1));
  const int id = plan.link(0).slot(0).id();
  absl::Status sent;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        CommunicatorOptions options = Options();
        options.ns = "header_too_large";
        ASSIGN_OR_RETURN(auto copy, RdmaCopyCommunicator::Create(plan, transport, store,
                                                                 options, CopyOptions()));
        if (rank == 0) {
          float x = 1.0f;
          OutgoingTensor tensor;
          tensor.data = reinterpret_cast<const std::byte*>(&x);
          tensor.bytes = sizeof(x);
          tensor.shape = std::vector<int64_t>(600, 1);
          sent = copy->Send(id, tensor);
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_THAT(sent, StatusIs(absl::StatusCode::kInvalidArgument,
                             AllOf(HasSubstr("a message slot has room for"),
                                   HasSubstr("600 dimensions"))));
}

// Rank 1 joins as rdma_copy's receiver would (its address, its side of the
// link), then writes a credit into rank 0's credit word releasing 1000
// messages before any was sent; rank 0, an honest sender, must refuse it.
TEST(RdmaCopyHostileTest, ACreditReleasingUnsentMessagesFailsTheSender) {
  const plan::TransferPlan& plan = StaticPlan();
  const std::string forged = absl::StrCat(kNs, "/credit_forged");
  const std::string judged = absl::StrCat(kNs, "/credit_judged");
  absl::Status sent;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          ASSIGN_OR_RETURN(HonestLink link, JoinLink(1, transport, store));
          ASSIGN_OR_RETURN(rdma::testing::RawPeer peer,
                           rdma::testing::RawPeer::Connect(transport, store, kNs, 0, 64,
                                                           absl::Seconds(20)));
          // The sender's side: the ring of messages goes out.
          ASSIGN_OR_RETURN(rdma::RemoteRegion sender, LinkRegionOf(store, 0));
          ASSIGN_OR_RETURN(onesided::SlotLinkLayout layout,
                           onesided::SlotLinkLayout::Create({}, {Messages()}));
          RETURN_IF_ERROR(peer.WriteWord(sender, layout.credit(0), 1000));
          RETURN_IF_ERROR(store.Set(forged, "1"));
          return store.Wait({judged}, absl::Seconds(20));
        }
        ASSIGN_OR_RETURN(auto copy, RdmaCopyCommunicator::Create(plan, transport, store,
                                                                 Options(), CopyOptions()));
        RETURN_IF_ERROR(store.Wait({forged}, absl::Seconds(20)));
        std::vector<float> x(40, 1.0f);
        OutgoingTensor tensor;
        tensor.data = reinterpret_cast<const std::byte*>(x.data());
        tensor.bytes = x.size() * sizeof(float);
        tensor.shape = {40};
        sent = copy->Send(StaticId(), tensor);
        RETURN_IF_ERROR(store.Set(judged, "1"));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_THAT(sent, StatusIs(absl::StatusCode::kDataLoss,
                             HasSubstr("rank 1 wrote a credit releasing 1000 messages, but "
                                       "only 0 were sent")));
}

}  // namespace
}  // namespace rdmaflow::runtime
