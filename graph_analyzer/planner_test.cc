// File: planner_test.cc
#include "graph_analyzer/planner.h"

#include <map>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Rank 0 produces a [10, 10] float tensor (400 B) read on ranks 1 and 2, and
// a dynamic [-1, 4] one read on rank 1.
GraphDef TwoLinks() {
  GraphBuilder b("two_links");
  std::string x = b.Placeholder("x", DT_FLOAT32, {10, 10});
  std::string d = b.Placeholder("d", DT_FLOAT32, {-1, 4});
  b.SetRank(1);
  b.Op("y", "Relu", {x});
  b.Op("z", "Relu", {d});
  b.SetRank(2);
  b.Op("w", "Relu", {x});
  return std::move(b).Build();
}

// Device slots: a static tensor every consumer reads on the device lives
// in the link's device region; the rest, dynamic ones included, in the host
// region; the summary counts the device bytes apart.
TEST(PlannerTest, DeviceSlotsGetADeviceRegionOfTheirOwn) {
  GraphBuilder b("device_slots");
  b.SetMemory(MEMORY_DEVICE);
  std::string a = b.Placeholder("a", DT_FLOAT32, {8, 8});   // device -> device
  b.SetMemory(MEMORY_HOST);
  std::string h = b.Placeholder("h", DT_FLOAT32, {4, 4});   // host -> host
  std::string w = b.Placeholder("w", DT_FLOAT32, {2, 8});   // host -> device
  std::string d = b.Placeholder("d", DT_FLOAT32, {-1, 4});  // dynamic, device reader
  std::string m = b.Placeholder("m", DT_FLOAT32, {2, 2});   // read on both
  b.SetRank(1);
  b.SetMemory(MEMORY_DEVICE);
  b.Op("ya", "Relu", {a});
  b.Op("yw", "Relu", {w});
  b.Op("yd", "Relu", {d});
  b.Op("ym", "Relu", {m});
  b.SetMemory(MEMORY_HOST);
  b.Op("yh", "Relu", {h});
  b.Op("ym2", "Relu", {m});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(std::move(b).Build(), {}));
  ASSERT_EQ(p.link_size(), 1);
  const plan::LinkRegion& link = p.link(0);
  std::map<std::string, const plan::TensorSlot*> slots;
  for (const plan::TensorSlot& slot : link.slot()) slots[slot.tensor()] = &slot;
  ASSERT_EQ(slots.size(), 5u);
  EXPECT_EQ(slots["a:0"]->memory(), MEMORY_DEVICE);
  EXPECT_EQ(slots["a:0"]->source_memory(), MEMORY_DEVICE);
  EXPECT_EQ(slots["w:0"]->memory(), MEMORY_DEVICE);
  EXPECT_EQ(slots["w:0"]->source_memory(), MEMORY_HOST);
  EXPECT_EQ(slots["h:0"]->memory(), MEMORY_HOST);
  EXPECT_EQ(slots["m:0"]->memory(), MEMORY_HOST);  // a host reader too
  // Dynamic: through host memory, whoever reads it.
  EXPECT_EQ(slots["d:0"]->memory(), MEMORY_HOST);
  EXPECT_EQ(slots["d:0"]->kind(), plan::DYNAMIC);
  // Device region: a (256 B) and w (64 B), one each; host: h (64), m (64),
  // d's metadata (128).
  EXPECT_EQ(link.device_stage_bytes(), 320u);
  EXPECT_EQ(link.device_region_bytes(), 640u);
  EXPECT_EQ(link.stage_bytes(), 256u);
  EXPECT_EQ(link.region_bytes(), 512u);
  for (const plan::TensorSlot* slot : {slots["a:0"], slots["w:0"]}) {
    EXPECT_LE(slot->offset() + slot->bytes(), link.device_stage_bytes()) << slot->tensor();
  }
  EXPECT_NE(slots["a:0"]->offset(), slots["w:0"]->offset());
  // Rank 1 receives both regions (device 640 B); rank 0 holds a's send
  // buffers on the device (2 x 256 B).
  EXPECT_EQ(p.rank(1).receive_bytes(), 1152u);
  EXPECT_EQ(p.rank(1).device_bytes(), 640u);
  EXPECT_EQ(p.rank(0).device_bytes(), 512u);
}

TEST(PlannerTest, AnUnknownMemoryIsRefusedByNode) {
  GraphBuilder b("bad_memory");
  std::string x = b.Placeholder("x", DT_FLOAT32, {2});
  b.SetRank(1);
  b.Op("y", "Relu", {x});
  GraphDef graph = std::move(b).Build();
  graph.mutable_node(1)->set_memory(static_cast<Memory>(7));
  EXPECT_THAT(PlanGraph(graph, {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("memory 7")));
}

TEST(PlannerTest, StaticAndDynamicSlots) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(TwoLinks(), {}));
  EXPECT_EQ(p.world_size(), 3);
  ASSERT_EQ(p.link_size(), 2);
  const plan::LinkRegion& to1 = p.link(0);
  EXPECT_EQ(to1.src_rank(), 0);
  EXPECT_EQ(to1.dst_rank(), 1);
  ASSERT_EQ(to1.slot_size(), 2);
  EXPECT_EQ(to1.slot(0).tensor(), "x:0");
  EXPECT_EQ(to1.slot(0).kind(), plan::STATIC);
  EXPECT_EQ(to1.slot(0).bytes(), 400u);
  EXPECT_EQ(to1.slot(1).tensor(), "d:0");
  EXPECT_EQ(to1.slot(1).kind(), plan::DYNAMIC);
  EXPECT_EQ(to1.slot(1).bytes(), 128u);
  EXPECT_THAT(to1.slot(1).consumers(), ElementsAre("z"));
  // Both live at once: 448 + 128 bytes per stage, two stages.
  EXPECT_EQ(to1.alignment(), 64u);
  EXPECT_EQ(to1.stage_bytes(), 576u);
  EXPECT_EQ(to1.depth(), 2);
  EXPECT_EQ(to1.region_bytes(), 1152u);
  EXPECT_EQ(p.link(1).dst_rank(), 2);
  EXPECT_EQ(p.link(1).region_bytes(), 2 * 448u);
  // Ids are dense over the plan.
  EXPECT_EQ(to1.slot(0).id(), 0);
  EXPECT_EQ(to1.slot(1).id(), 1);
  EXPECT_EQ(p.link(1).slot(0).id(), 2);
}

TEST(PlannerTest, RankSummariesCountASharedSendBufferOnce) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(TwoLinks(), {}));
  ASSERT_EQ(p.rank_size(), 3);
  // x goes to two ranks from one send buffer; d is dynamic (no buffer).
  EXPECT_EQ(p.rank(0).send_bytes(), 2 * 448u);
  EXPECT_EQ(p.rank(0).receive_bytes(), 0u);
  EXPECT_EQ(p.rank(0).num_regions(), 0);
  EXPECT_EQ(p.rank(1).receive_bytes(), 1152u);
  EXPECT_EQ(p.rank(1).num_regions(), 1);
  EXPECT_EQ(p.rank(1).registered_bytes(), 1152u);
  EXPECT_EQ(p.rank(2).registered_bytes(), 896u);
}

TEST(PlannerTest, AlignmentAndDepthAreConfigurable) {
  PlannerOptions options;
  options.alignment = 4096;
  options.pipeline_depth = 3;
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(TwoLinks(), options));
  const plan::LinkRegion& to1 = p.link(0);
  EXPECT_EQ(to1.slot(1).offset() % 4096, 0u);
  EXPECT_EQ(to1.stage_bytes(), 8192u);
  EXPECT_EQ(to1.region_bytes(), 3 * 8192u);
  EXPECT_EQ(p.config().pipeline_depth(), 3);
}

TEST(PlannerTest, BadOptionsAreRejected) {
  PlannerOptions options;
  options.alignment = 32;
  EXPECT_THAT(PlanGraph(TwoLinks(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("alignment 32 must be a power of two")));
  options = {};
  options.alignment = 96;
  EXPECT_THAT(PlanGraph(TwoLinks(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("power of two")));
  options = {};
  options.pipeline_depth = 0;
  EXPECT_THAT(PlanGraph(TwoLinks(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pipeline depth 0")));
  options = {};
  options.metadata_bytes = 100;
  EXPECT_THAT(PlanGraph(TwoLinks(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata bytes 100")));
}

TEST(PlannerTest, DynamicTensorOfHighRankNeedsMoreMetadata) {
  GraphBuilder b("high_rank");
  std::string x = b.Placeholder("x", DT_FLOAT32, {-1, 2, 2, 2, 2, 2, 2, 2, 2});
  b.SetRank(1);
  b.Op("y", "Relu", {x});
  PlannerOptions options;
  options.metadata_bytes = 64;
  EXPECT_THAT(PlanGraph(std::move(b).Build(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dynamic tensor x:0 float32[-1, 2, 2, 2, 2, "
                                 "2, 2, 2, 2] needs 104 bytes of metadata")));
}

TEST(PlannerTest, SlotsShareMemoryOnlyWhenNeverLiveTogether) {
  // Rank 0 sends a, then b, to rank 1; a's last reader runs before b exists.
  GraphBuilder b("sequential");
  std::string a = b.Placeholder("a", DT_FLOAT32, {256});
  b.SetRank(1);
  std::string ra = b.Op("ra", "Relu", {a}).out();
  b.SetRank(0);
  std::string bb = b.Op("b", "Gradient", {a, ra}).out();
  b.SetRank(1);
  b.Op("rb", "Relu", {bb});
  GraphDef graph = std::move(b).Build();
  PlannerOptions share_all;
  share_all.min_shared_bytes = 0;
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan shared, PlanGraph(graph, share_all));
  // Links 0 -> 1 (a, b) and 1 -> 0 (ra, read by b).
  ASSERT_EQ(shared.link_size(), 2);
  ASSERT_EQ(shared.link(0).dst_rank(), 1);
  ASSERT_EQ(shared.link(0).slot_size(), 2);
  EXPECT_EQ(shared.link(0).slot(0).offset(), shared.link(0).slot(1).offset());
  EXPECT_EQ(shared.link(0).stage_bytes(), 1024u);
  PlannerOptions no_share;
  no_share.share_slots = false;
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan separate, PlanGraph(graph, no_share));
  EXPECT_EQ(separate.link(0).stage_bytes(), 2048u);
  // By default only slots of min_shared_bytes (256 KiB) or more share: these
  // 1 KiB ones keep memory of their own.
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan small, PlanGraph(graph, {}));
  EXPECT_EQ(small.link(0).stage_bytes(), 2048u);
  EXPECT_NE(small.link(0).slot(0).offset(), small.link(0).slot(1).offset());
}

TEST(PlannerTest, SmallSlotsFollowTheSharedOnesInMemoryOfTheirOwn) {
  // a (1 MiB) and b (1 MiB) never live together; c (1 KiB) neither with b.
  GraphBuilder b("mixed");
  std::string a = b.Placeholder("a", DT_FLOAT32, {1 << 18});
  b.SetRank(1);
  std::string ra = b.Op("ra", "Relu", {a}).out();
  b.SetRank(0);
  std::string bb = b.Op("b", "Gradient", {a, ra}).out();
  std::string c = b.Placeholder("c", DT_FLOAT32, {256});
  b.SetRank(1);
  b.Op("rb", "Relu", {bb});
  b.Op("rc", "Relu", {c});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, PlanGraph(std::move(b).Build(), {}));
  const plan::LinkRegion& link = plan.link(0);
  ASSERT_EQ(link.dst_rank(), 1);
  std::map<std::string, const plan::TensorSlot*> by_name;
  for (const plan::TensorSlot& slot : link.slot()) by_name[slot.tensor()] = &slot;
  ASSERT_EQ(by_name.size(), 3u);
  const plan::TensorSlot* big_a = nullptr;
  const plan::TensorSlot* big_b = nullptr;
  const plan::TensorSlot* small = nullptr;
  for (const auto& [name, slot] : by_name) {
    if (slot->bytes() < 4096) {
      small = slot;
    } else if (big_a == nullptr) {
      big_a = slot;
    } else {
      big_b = slot;
    }
  }
  ASSERT_NE(small, nullptr);
  ASSERT_NE(big_b, nullptr);
  EXPECT_EQ(big_a->offset(), big_b->offset());     // shared
  EXPECT_EQ(small->offset(), uint64_t{1} << 20);   // after the shared peak
  EXPECT_EQ(link.stage_bytes(), (uint64_t{1} << 20) + 1024);
}

TEST(PlannerTest, PlanSurvivesATextRoundTrip) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(TwoLinks(), {}));
  std::string text = ToTextProto(p);
  plan::TransferPlan parsed;
  ASSERT_OK(ParseTextProto(text, "plan.pbtxt", &parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, parsed));
  // Laying the parsed plan out again changes nothing.
  ASSERT_OK(LayoutPlan(parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(p, parsed));
}

TEST(PlannerTest, LayoutRejectsAPlanWithLinksOutsideTheWorld) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PlanGraph(TwoLinks(), {}));
  p.mutable_link(0)->set_dst_rank(7);
  EXPECT_THAT(LayoutPlan(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("outside the world of 3")));
  p.set_world_size(1 << 30);
  EXPECT_THAT(LayoutPlan(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("world_size 1073741824")));
}

}  // namespace
}  // namespace rdmaflow::graph
