// GradientReadyOrder: the last layer's gradients complete first, a
// parameter read twice is complete only after both reads' gradients, and a
// graph that trains nothing is refused.
#include "graph_analyzer/gradient_order.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "graph_analyzer/testing/small_traces.h"
#include "graph_analyzer/training_graph.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

GraphDef Build(const std::string& text) {
  ModelTrace trace;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &trace));
  absl::StatusOr<GraphDef> g = BuildTrainingGraph(trace);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : GraphDef();
}

std::vector<std::string> Names(const std::vector<ReadyGradient>& order) {
  std::vector<std::string> names;
  for (const ReadyGradient& g : order) names.push_back(g.parameter);
  return names;
}

TEST(GradientOrderTest, TheLastLayersGradientsCompleteFirst) {
  // fc1 -> relu -> fc2, parameters listed first layer first.
  const GraphDef g = testing::TrainingGraphOf(testing::SmallMlpTrace());
  ASSERT_OK_AND_ASSIGN(std::vector<ReadyGradient> order, GradientReadyOrder(g));
  ASSERT_EQ(order.size(), 4u);
  // Both of fc2's before either of fc1's; one Gradient node completes a
  // layer's weight and bias together, which keep the model's order.
  EXPECT_THAT(Names(order), ElementsAre("fc2.weight", "fc2.bias", "fc1.weight", "fc1.bias"));
  EXPECT_EQ(order[0].elements, 64);
  EXPECT_EQ(order[2].elements, 320);
}

TEST(GradientOrderTest, AParameterReadTwiceIsCompleteAfterItsLastUse) {
  // w scales the input and, again, the output: its gradient is the sum of
  // both uses', complete only once backward reaches the first op.
  const GraphDef g = Build(R"pb(
    name: "tied" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 8] } }
    parameter { name: "w" spec { dtype: DT_FLOAT32 shape: [8] } }
    parameter { name: "v" spec { dtype: DT_FLOAT32 shape: [8] } }
    op { kind: "aten::mul" input: ["x", "w"]
         output: "a" output_spec { dtype: DT_FLOAT32 shape: [4, 8] } }
    op { kind: "aten::mul" input: ["a", "v"]
         output: "b" output_spec { dtype: DT_FLOAT32 shape: [4, 8] } }
    op { kind: "aten::mul" input: ["b", "w"]
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [4, 8] } }
    output: "y"
  )pb");
  ASSERT_OK_AND_ASSIGN(std::vector<ReadyGradient> order, GradientReadyOrder(g));
  EXPECT_THAT(Names(order), ElementsAre("v", "w"));
}

TEST(GradientOrderTest, AGraphThatTrainsNothingIsRefused) {
  GraphDef g;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    world_size: 1
    node { name: "x" op: "Placeholder" rank: 0
           output { dtype: DT_FLOAT32 shape: [4] } }
  )pb", &g));
  EXPECT_THAT(GradientReadyOrder(g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no ApplyGradient")));
}

}  // namespace
}  // namespace rdmaflow::graph
