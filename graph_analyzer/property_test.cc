// File: property_test.cc
// Properties of the whole pipeline over random graphs: they validate, each
// (tensor, destination) crosses once, each rank's partition stands alone,
// and no two slots live at the same time overlap in memory.
#include <set>
#include <string>
#include <tuple>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/testing/generated_graphs.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

void CheckPlan(const plan::TransferPlan& p, const AnalyzedGraph& g) {
  uint64_t receive_total = 0;
  for (const plan::LinkRegion& link : p.link()) {
    EXPECT_NE(link.src_rank(), link.dst_rank());
    receive_total += link.region_bytes();
    EXPECT_EQ(link.region_bytes(), link.stage_bytes() * link.depth());
    for (int i = 0; i < link.slot_size(); ++i) {
      const plan::TensorSlot& a = link.slot(i);
      EXPECT_EQ(a.offset() % link.alignment(), 0u);
      EXPECT_LE(a.offset() + a.bytes(), link.stage_bytes());
      EXPECT_LE(a.live_begin(), a.live_end());
      for (const std::string& consumer : a.consumers()) {
        EXPECT_EQ(g.node(g.Find(consumer)).rank, link.dst_rank());
      }
      for (int j = i + 1; j < link.slot_size(); ++j) {
        const plan::TensorSlot& b = link.slot(j);
        bool live_together = a.live_begin() <= b.live_end() &&
                             b.live_begin() <= a.live_end();
        bool disjoint = a.offset() + a.bytes() <= b.offset() ||
                        b.offset() + b.bytes() <= a.offset();
        EXPECT_TRUE(!live_together || disjoint)
            << a.tensor() << " and " << b.tensor() << " overlap while live";
      }
    }
  }
  uint64_t summed = 0;
  for (const plan::RankSummary& r : p.rank()) summed += r.receive_bytes();
  EXPECT_EQ(summed, receive_total);
}

TEST(PropertyTest, RandomGraphsPlanSoundly) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    testing::RandomGraphOptions options;
    options.num_nodes = 20 + seed * 7;
    options.world_size = 2 + seed % 5;
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph g,
                         AnalyzeGraph(testing::RandomGraph(options, seed)));
    Partition partition = PartitionGraph(g);
    std::set<std::tuple<int, int, int>> seen;
    for (const Transfer& t : partition.transfers) {
      EXPECT_TRUE(
          seen.emplace(t.tensor.node, t.tensor.output, t.dst_rank).second)
          << "two transfers of " << g.def(t.tensor.node).name() << " to rank "
          << t.dst_rank;
    }
    for (const GraphDef& rank_graph : partition.rank_graphs) {
      EXPECT_OK(AnalyzeGraph(rank_graph).status()) << rank_graph.name();
    }
    PlannerOptions planner;
    planner.pipeline_depth = 1 + seed % 4;
    planner.alignment = 64 << (seed % 3);
    ASSERT_OK_AND_ASSIGN(plan::TransferPlan p,
                         BuildPlan(g, partition, planner));
    CheckPlan(p, g);
  }
}

TEST(PropertyTest, ResNet50ParameterServerGraph) {
  EXPECT_EQ(testing::ResNet50ParameterCount(), 25557032);
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g,
                       AnalyzeGraph(testing::ResNet50ParameterServer(4, 2)));
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p,
                       BuildPlan(g, PartitionGraph(g), PlannerOptions{}));
  // 4 workers x 2 servers, both directions; 161 tensors each way per worker.
  EXPECT_EQ(p.link_size(), 16);
  int to_servers = 0;
  for (const plan::LinkRegion& link : p.link()) {
    if (link.dst_rank() >= 4) to_servers += link.slot_size();
  }
  EXPECT_EQ(to_servers, 4 * 161);
  CheckPlan(p, g);
}

}  // namespace
}  // namespace rdmaflow::graph
