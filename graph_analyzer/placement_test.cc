// File: placement_test.cc
#include "graph_analyzer/placement.h"

#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/testing/small_traces.h"
#include "graph_analyzer/training_graph.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// conv 3x3 -> relu -> flatten -> linear: features, then one FC layer
// (scaled by a buffer when `scaled`).
GraphDef Model(bool scaled = false) {
  return testing::TrainingGraphOf(testing::SmallCnnTrace(scaled));
}

// (src, dst) -> tensors crossing, by their producer's name.
std::map<std::pair<int, int>, std::vector<std::string>> Crossings(const GraphDef& g) {
  absl::StatusOr<AnalyzedGraph> a = AnalyzeGraph(g);
  EXPECT_TRUE(a.ok()) << a.status();
  std::map<std::pair<int, int>, std::vector<std::string>> out;
  if (!a.ok()) return out;
  for (const Transfer& t : PartitionGraph(*a).transfers) {
    out[{t.src_rank, t.dst_rank}].push_back(a->def(t.tensor.node).name());
  }
  return out;
}

std::pair<int, int> Link(int src, int dst) { return {src, dst}; }

int RankOf(const GraphDef& g, const std::string& name) {
  for (const NodeDef& n : g.node()) {
    if (n.name() == name) return n.rank();
  }
  return -1;
}

TEST(PlacementTest, ParameterServerPullsParametersAndPushesGradients) {
  ASSERT_OK_AND_ASSIGN(PlacementSpec spec, ParsePlacementSpec("ps:servers=2,workers=2"));
  ASSERT_OK_AND_ASSIGN(GraphDef g, PlaceTrainingGraph(Model(), spec));
  EXPECT_EQ(g.world_size(), 4);
  // Largest first onto the least loaded server.
  EXPECT_EQ(RankOf(g, "ps/fc.weight"), 0);
  EXPECT_EQ(RankOf(g, "ps/conv.weight"), 1);
  EXPECT_EQ(RankOf(g, "w1/linear_3"), 3);
  auto crossings = Crossings(g);
  // Worker 0 (rank 2) pulls fc.weight from server 0 and pushes its gradient.
  EXPECT_THAT(crossings[Link(0, 2)], ::testing::ElementsAre("ps/fc.weight"));
  EXPECT_THAT(crossings[Link(2, 0)], ::testing::ElementsAre("w0/fc.weight/grad"));
  EXPECT_EQ(crossings[Link(1, 3)].size(), 3u);  // conv.weight, conv.bias, fc.bias
  EXPECT_EQ(crossings[Link(3, 1)].size(), 3u);
  EXPECT_EQ(crossings.count(Link(2, 3)), 0u);  // workers never talk
  // One update per parameter, with both workers' gradients.
  for (const NodeDef& n : g.node()) {
    if (n.op() == "ApplyGradient") EXPECT_EQ(n.input_size(), 3) << n.name();
  }
  // What the ps strategy shards by.
  ASSERT_OK_AND_ASSIGN(auto servers, PsParameterServers(g));
  EXPECT_EQ(servers.size(), 4u);
  EXPECT_EQ(servers.at("fc.weight"), 0);
  EXPECT_EQ(servers.at("conv.weight"), 1);
  EXPECT_EQ(servers.at("conv.bias"), 1);
  EXPECT_EQ(servers.at("fc.bias"), 1);
  EXPECT_THAT(PsParameterServers(Model()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ps placement")));
}

TEST(PlacementTest, AllReduceReplicasExchangeNothingPointToPoint) {
  ASSERT_OK_AND_ASSIGN(PlacementSpec spec, ParsePlacementSpec("allreduce:workers=3"));
  ASSERT_OK_AND_ASSIGN(GraphDef g, PlaceTrainingGraph(Model(), spec));
  EXPECT_EQ(g.world_size(), 3);
  EXPECT_EQ(RankOf(g, "w2/fc.weight"), 2);
  EXPECT_EQ(RankOf(g, "w2/fc.weight/apply"), 2);
  EXPECT_TRUE(Crossings(g).empty());
}

TEST(PlacementTest, LayerSeparatedCutsBeforeTheFirstFullyConnectedLayer) {
  ASSERT_OK_AND_ASSIGN(PlacementSpec spec, ParsePlacementSpec("layer_separated:conv=2,fc=1"));
  ASSERT_OK_AND_ASSIGN(GraphDef g, PlaceTrainingGraph(Model(), spec));
  EXPECT_EQ(g.world_size(), 3);
  EXPECT_EQ(RankOf(g, "c1/conv2d_0"), 1);
  EXPECT_EQ(RankOf(g, "c1/flatten_2"), 1);
  EXPECT_EQ(RankOf(g, "c1/linear_3"), 2);
  EXPECT_EQ(RankOf(g, "c1/loss"), 2);
  EXPECT_EQ(RankOf(g, "c1/conv2d_0/grad"), 1);
  EXPECT_EQ(RankOf(g, "c1/linear_3/grad"), 2);
  // The head's parameters once on the FC rank, the features' per conv rank.
  EXPECT_EQ(RankOf(g, "f0/fc.weight"), 2);
  EXPECT_EQ(RankOf(g, "c1/conv.weight"), 1);
  auto crossings = Crossings(g);
  // Activations and labels forward, the activations' gradient back.
  EXPECT_THAT(crossings[Link(1, 2)], ::testing::UnorderedElementsAre("c1/flatten_2", "c1/labels"));
  EXPECT_THAT(crossings[Link(2, 1)], ::testing::ElementsAre("c1/linear_3/grad"));
  EXPECT_EQ(crossings.count(Link(0, 1)), 0u);
  // A buffer only the head reads lives with the head: it never crosses.
  ASSERT_OK_AND_ASSIGN(g, PlaceTrainingGraph(Model(/*scaled=*/true), spec));
  EXPECT_EQ(RankOf(g, "c1/scale"), 2);
  EXPECT_EQ(RankOf(g, "c1/mul_4"), 2);
  EXPECT_THAT(Crossings(g)[Link(1, 2)],
              ::testing::UnorderedElementsAre("c1/flatten_2", "c1/labels"));
  // An explicit cut moves the boundary.
  ASSERT_OK_AND_ASSIGN(spec, ParsePlacementSpec("layer_separated:conv=1,fc=1,cut=relu_1"));
  ASSERT_OK_AND_ASSIGN(g, PlaceTrainingGraph(Model(), spec));
  EXPECT_EQ(RankOf(g, "c0/flatten_2"), 1);
}

TEST(PlacementTest, BadSpecsAndModelsAreRefusedNamingTheProblem) {
  EXPECT_THAT(ParsePlacementSpec("gossip"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown strategy 'gossip'")));
  EXPECT_THAT(ParsePlacementSpec("ps:shards=2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown key 'shards' (known: servers, workers)")));
  EXPECT_THAT(ParsePlacementSpec("ps:workers=0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("workers=0")));
  EXPECT_THAT(ParsePlacementSpec("ps:workers"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not key=value")));
  ASSERT_OK_AND_ASSIGN(PlacementSpec bad_cut,
                       ParsePlacementSpec("layer_separated:cut=nowhere"));
  EXPECT_THAT(PlaceTrainingGraph(Model(), bad_cut),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut 'nowhere'")));
  ASSERT_OK_AND_ASSIGN(PlacementSpec last, ParsePlacementSpec("layer_separated:cut=loss"));
  EXPECT_THAT(PlaceTrainingGraph(Model(), last),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nothing follows")));
  ASSERT_OK_AND_ASSIGN(PlacementSpec ps0, ParsePlacementSpec("ps"));
  PlacementSpec zero = ps0;
  zero.fc_ranks = 0;
  EXPECT_THAT(PlaceTrainingGraph(Model(), zero),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be in 1..1024")));
  GraphDef spread = Model();
  spread.mutable_node(1)->set_rank(1);
  ASSERT_OK_AND_ASSIGN(PlacementSpec ps, ParsePlacementSpec("ps"));
  EXPECT_THAT(PlaceTrainingGraph(spread, ps),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("on rank 1")));
  GraphDef broken = Model();
  broken.mutable_node(5)->set_input(0, "missing:0");
  EXPECT_THAT(PlaceTrainingGraph(broken, ps),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("placement:")));
}

}  // namespace
}  // namespace rdmaflow::graph
