// File: partition_test.cc
#include "graph_analyzer/partition.h"

#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/graph_builder.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;

// x (rank 0) is read by three nodes on rank 1 and two on rank 2.
GraphDef FanOut() {
  GraphBuilder b("fan_out");
  std::string x = b.Placeholder("x", DT_FLOAT32, {8, 16});
  b.SetRank(1);
  std::string a = b.Op("a", "Relu", {x}).out();
  std::string c = b.Op("c", "Add", {x, x}).out();
  b.Op("d", "Add", {a, x});
  b.SetRank(2);
  b.Op("e", "Relu", {x});
  b.Op("f", "Sigmoid", {x});
  b.SetRank(0);
  b.Op("g", "Relu", {x});
  return std::move(b).Build();
}

std::vector<std::string> Names(const GraphDef& graph) {
  std::vector<std::string> names;
  for (const NodeDef& n : graph.node()) names.push_back(n.name());
  return names;
}

TEST(PartitionTest, OneTransferPerTensorAndDestination) {
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, AnalyzeGraph(FanOut()));
  Partition p = PartitionGraph(g);
  ASSERT_THAT(p.transfers, SizeIs(2));
  const Transfer& to1 = p.transfers[0];
  EXPECT_EQ(to1.src_rank, 0);
  EXPECT_EQ(to1.dst_rank, 1);
  EXPECT_EQ(g.def(to1.tensor.node).name(), "x");
  EXPECT_THAT(to1.consumers,
              ElementsAre(g.Find("a"), g.Find("c"), g.Find("d")));
  EXPECT_EQ(to1.live_begin, g.node(g.Find("x")).position);
  EXPECT_EQ(to1.live_end, g.node(g.Find("d")).position);
  const Transfer& to2 = p.transfers[1];
  EXPECT_EQ(to2.dst_rank, 2);
  EXPECT_THAT(to2.consumers, ElementsAre(g.Find("e"), g.Find("f")));
}

TEST(PartitionTest, RankGraphsHaveSendsAndRecvsAndAreValid) {
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, AnalyzeGraph(FanOut()));
  Partition p = PartitionGraph(g);
  ASSERT_THAT(p.rank_graphs, SizeIs(3));
  EXPECT_THAT(Names(p.rank_graphs[0]),
              ElementsAre("x", "_send/x/0/to/1", "_send/x/0/to/2", "g"));
  EXPECT_THAT(Names(p.rank_graphs[1]),
              ElementsAre("_recv/x/0", "a", "c", "d"));
  EXPECT_THAT(Names(p.rank_graphs[2]), ElementsAre("_recv/x/0", "e", "f"));
  // Consumers read the Recv, once per use.
  const NodeDef& c = p.rank_graphs[1].node(2);
  EXPECT_THAT(c.input(), ElementsAre("_recv/x/0:0", "_recv/x/0:0"));
  const NodeDef& send = p.rank_graphs[0].node(2);
  EXPECT_EQ(send.op(), "Send");
  EXPECT_EQ(send.attr().at("dst_rank").i(), 2);
  EXPECT_EQ(send.attr().at("transfer_id").i(), 1);
  const NodeDef& recv = p.rank_graphs[2].node(0);
  EXPECT_EQ(recv.attr().at("src_rank").i(), 0);
  EXPECT_EQ(recv.attr().at("transfer_id").i(), 1);
  // Each rank's graph stands alone: it validates and infers the same specs.
  for (const GraphDef& rank_graph : p.rank_graphs) {
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph part, AnalyzeGraph(rank_graph));
    for (const NodeDef& node : rank_graph.node()) {
      int original = g.Find(node.name());
      if (original < 0) continue;
      const auto& specs = part.node(part.Find(node.name())).outputs;
      ASSERT_EQ(specs.size(), g.node(original).outputs.size());
      for (size_t k = 0; k < specs.size(); ++k) {
        EXPECT_EQ(specs[k].SerializeAsString(),
                  g.node(original).outputs[k].SerializeAsString());
      }
    }
  }
}

TEST(PartitionTest, SingleRankGraphHasNoTransfers) {
  GraphBuilder b("local");
  b.Op("y", "Relu", {b.Placeholder("x", DT_FLOAT32, {4})});
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, AnalyzeGraph(std::move(b).Build()));
  Partition p = PartitionGraph(g);
  EXPECT_TRUE(p.transfers.empty());
  ASSERT_THAT(p.rank_graphs, SizeIs(1));
  EXPECT_THAT(Names(p.rank_graphs[0]), ElementsAre("x", "y"));
}

}  // namespace
}  // namespace rdmaflow::graph
