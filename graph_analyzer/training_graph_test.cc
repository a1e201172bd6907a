// File: training_graph_test.cc
#include "graph_analyzer/training_graph.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "google/protobuf/text_format.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/model_trace.pb.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/testing/generated_graphs.h"
#include "graph_analyzer/testing/small_traces.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

ModelTrace Trace(const std::string& text) {
  ModelTrace trace;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &trace)) << text;
  return trace;
}

const NodeDef* Node(const GraphDef& g, const std::string& name) {
  for (const NodeDef& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

std::string Spec(const AnalyzedGraph& a, const std::string& node, int k = 0) {
  const int i = a.Find(node);
  if (i < 0) return "missing";
  return SpecString(a.spec(OutputId{i, k}));
}


TEST(TrainingGraphTest, AnMlpTraceBecomesAStepWithLossGradientsAndUpdates) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(testing::SmallMlpTrace()));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
  // Forward: the analyzer's own ops, with the traced shapes.
  EXPECT_EQ(Node(g, "input")->op(), "Placeholder");
  EXPECT_EQ(Node(g, "fc1.weight")->op(), "Variable");
  EXPECT_EQ(Node(g, "linear_0")->op(), "MatMul");
  EXPECT_EQ(Node(g, "linear_0/bias")->op(), "Add");
  EXPECT_EQ(Node(g, "relu_1")->op(), "Relu");
  EXPECT_EQ(Spec(a, "linear_2/bias"), "float32[8, 4]");
  // The loss on [N, C] logits, with int64 labels.
  EXPECT_EQ(Node(g, "loss")->op(), "SoftmaxCrossEntropy");
  EXPECT_EQ(Spec(a, "labels"), "int64[8]");
  // Backward: the input needs no gradient, so linear_0 differentiates its
  // weight and bias only.
  const NodeDef* g0 = Node(g, "linear_0/grad");
  ASSERT_NE(g0, nullptr);
  EXPECT_EQ(g0->attr().at("wrt").i(), 2);
  EXPECT_EQ(g0->input(0), "fc1.weight:0");
  // Every parameter's gradient has its spec, and is applied.
  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(Spec(a, absl::StrCat(p, "/grad")), Spec(a, p));
    ASSERT_NE(Node(g, absl::StrCat(p, "/apply")), nullptr);
    EXPECT_EQ(Node(g, absl::StrCat(p, "/apply"))->op(), "ApplyGradient");
  }
  EXPECT_EQ(ParameterGradient("fc1.weight"), "fc1.weight/grad:0");
  for (const NodeDef& n : g.node()) EXPECT_EQ(n.rank(), 0) << n.name();
}

TEST(TrainingGraphTest, OpsTheAnalyzerDoesNotKnowAreCarriedWithTheirShapes) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(Trace(R"pb(
    name: "ln" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [2, 5, 8] } }
    parameter { name: "norm.weight" spec { dtype: DT_FLOAT32 shape: [8] } }
    parameter { name: "norm.bias" spec { dtype: DT_FLOAT32 shape: [8] } }
    op { kind: "aten::layer_norm" input: ["x", "norm.weight", "norm.bias"]
         arg { key: "normalized_shape" value { ints: [8] } }
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [2, 5, 8] } }
    output: "y"
  )pb")));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
  const NodeDef* ln = Node(g, "layer_norm_0");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->op(), "Opaque");
  EXPECT_EQ(ln->attr().at("op").s(), "aten::layer_norm");
  EXPECT_EQ(Spec(a, "layer_norm_0"), "float32[2, 5, 8]");
  // A 3-d output is not logits: the loss is its mean.
  EXPECT_EQ(Node(g, "loss")->op(), "ReduceMean");
  EXPECT_EQ(Spec(a, "norm.weight/grad"), "float32[8]");
}

TEST(TrainingGraphTest, KnownOpsAreUsedOnlyWhereTheirShapesAgreeWithTheTrace) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(Trace(R"pb(
    name: "cnn" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [2, 3, 8, 8] } }
    parameter { name: "conv.weight" spec { dtype: DT_FLOAT32 shape: [4, 3, 3, 3] } }
    parameter { name: "conv.bias" spec { dtype: DT_FLOAT32 shape: [4] } }
    op { kind: "aten::conv2d" input: ["x", "conv.weight", "conv.bias"]
         arg { key: "stride" value { ints: [1, 1] } }
         arg { key: "padding" value { ints: [1, 1] } }
         arg { key: "dilation" value { ints: [1, 1] } }
         arg { key: "groups" value { i: 1 } }
         output: "c" output_spec { dtype: DT_FLOAT32 shape: [2, 4, 8, 8] } }
    op { kind: "aten::max_pool2d" input: "c"
         arg { key: "kernel_size" value { i: 2 } }
         arg { key: "stride" value { } }
         output: "p" output_spec { dtype: DT_FLOAT32 shape: [2, 4, 4, 4] } }
    op { kind: "aten::flatten" input: "p"
         arg { key: "start_dim" value { i: 0 } } arg { key: "end_dim" value { i: -1 } }
         output: "f0" output_spec { dtype: DT_FLOAT32 shape: [128] } }
    op { kind: "aten::flatten" input: "p"
         arg { key: "start_dim" value { i: 1 } } arg { key: "end_dim" value { i: -1 } }
         output: "f1" output_spec { dtype: DT_FLOAT32 shape: [2, 64] } }
    op { kind: "aten::conv2d" input: ["x", "conv.weight"]
         arg { key: "stride" value { ints: [1, 1] } }
         arg { key: "padding" value { ints: [0, 0] } }
         arg { key: "dilation" value { ints: [2, 2] } }
         arg { key: "groups" value { i: 1 } }
         output: "d" output_spec { dtype: DT_FLOAT32 shape: [2, 4, 4, 4] } }
    output: "f1"
  )pb")));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
  EXPECT_EQ(Node(g, "conv2d_0")->op(), "Conv2D");
  EXPECT_EQ(Node(g, "conv2d_0/bias")->op(), "BiasAdd");
  EXPECT_EQ(Node(g, "max_pool2d_1")->op(), "MaxPool");
  EXPECT_EQ(Spec(a, "max_pool2d_1"), "float32[2, 4, 4, 4]");
  // flatten(start_dim=0) is 1-d; the analyzer's Flatten is always 2-d.
  EXPECT_EQ(Node(g, "flatten_2")->op(), "Opaque");
  EXPECT_EQ(Node(g, "flatten_3")->op(), "Flatten");
  // A dilated convolution is carried as it is.
  EXPECT_EQ(Node(g, "conv2d_4")->op(), "Opaque");
  // Its output does not reach the loss: it gets no gradient node.
  EXPECT_EQ(Node(g, "conv2d_4/grad"), nullptr);
}

TEST(TrainingGraphTest, GradientsOfATensorReadTwiceAreSummed) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(Trace(R"pb(
    name: "twice" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    parameter { name: "w" spec { dtype: DT_FLOAT32 shape: [6, 6] } }
    op { kind: "aten::matmul" input: ["x", "w"]
         output: "h" output_spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    op { kind: "aten::mul" input: ["h", "h"]
         output: "s" output_spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    op { kind: "aten::add" input: ["s", "h"] arg { key: "alpha" value { i: 1 } }
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    output: "y"
  )pb")));
  ASSERT_OK(AnalyzeGraph(g).status());
  const NodeDef* sum = Node(g, "matmul_0/grad_sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->op(), "AddN");
  EXPECT_EQ(sum->input_size(), 3);  // twice from mul, once from add
  EXPECT_EQ(Node(g, "w/grad")->op(), "Identity");
}

TEST(TrainingGraphTest, AParameterNamedLikeAGeneratedNodeIsKeptApart) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(Trace(R"pb(
    name: "clash" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    parameter { name: "loss" spec { dtype: DT_FLOAT32 shape: [6, 3] } }
    op { kind: "aten::matmul" input: ["x", "loss"]
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [4, 3] } }
    output: "y"
  )pb")));
  ASSERT_OK(AnalyzeGraph(g).status());
  EXPECT_EQ(Node(g, "loss")->op(), "Variable");
  EXPECT_EQ(Node(g, "loss_")->op(), "SoftmaxCrossEntropy");
  EXPECT_EQ(Node(g, "loss/apply")->input(1), "loss/grad:0");
}

TEST(TrainingGraphTest, SlashesInTracedNamesNeverReachNodeNames) {
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(Trace(R"pb(
    name: "slash" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    parameter { name: "fc/w" spec { dtype: DT_FLOAT32 shape: [6, 3] } }
    op { kind: "custom::a/b" input: ["x", "fc/w"]
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [4, 3] } }
    output: "y"
  )pb")));
  ASSERT_OK(AnalyzeGraph(g).status());
  EXPECT_EQ(Node(g, "fc_w")->op(), "Variable");
  EXPECT_EQ(Node(g, "a_b_0")->op(), "Opaque");
  EXPECT_NE(Node(g, "fc_w/apply"), nullptr);
}

TEST(TrainingGraphTest, InconsistentTracesAreRefusedNamingWhatIsWrong) {
  const std::string head = R"pb(
    name: "bad" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 6] } }
    parameter { name: "w" spec { dtype: DT_FLOAT32 shape: [6, 3] } }
  )pb";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "v"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 3] } } output: "y")pb",
       "op #0 (aten::matmul) reads 'v'"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "x"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 3] } } output: "x")pb",
       "tensor 'x' is defined twice"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "y" } output: "y")pb",
       "1 output(s) and 0 output spec(s)"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 3] } } output: "z")pb",
       "its output 'z' is not a tensor"},
      {head + R"pb(op { kind: "aten::relu" input: ["x"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 6] } } output: "y")pb",
       "no parameter reaches its output 'y'"},
      {R"pb(name: "bad" input { name: "x" spec { dtype: DT_FLOAT32 shape: [4] } }
            output: "x")pb",
       "no trainable parameters"},
      {R"pb(name: "bad" output: "x")pb", "has no inputs"},
      {head + R"pb(op { kind: "aten::" input: ["x", "w"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 3] } } output: "y")pb",
       "op #0 (aten::) has no kind"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, -3] } } output: "y")pb",
       "tensor 'y': dimension 1 of [4, -3] is negative"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "y"
                        output_spec { dtype: DT_FLOAT32 shape: [4, 0] } } output: "y")pb",
       "tensor 'y'"},
      {head + R"pb(op { kind: "aten::matmul" input: ["x", "w"] output: "y"
                        output_spec { shape: [4, 3] } } output: "y")pb",
       "tensor 'y': invalid dtype 0"},
      {R"pb(name: "bad" input { name: "x" spec { dtype: DT_FLOAT32 shape: [4, 1099511627777] } }
            parameter { name: "w" spec { dtype: DT_FLOAT32 shape: [4] } } output: "x")pb",
       "exceeds 2^40"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_THAT(BuildTrainingGraph(Trace(c.text)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

TEST(TrainingGraphTest, AResNet50TraceBecomesAStepOfAllItsParameters) {
  const ModelTrace trace = testing::ResNet50Trace(8);
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(trace));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
  int variables = 0, convs = 0, pools = 0, applies = 0;
  for (const NodeDef& n : g.node()) {
    variables += n.op() == "Variable";
    convs += n.op() == "Conv2D";
    pools += n.op() == "MaxPool";
    applies += n.op() == "ApplyGradient";
  }
  EXPECT_EQ(variables, 161);
  EXPECT_EQ(applies, 161);
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(pools, 1);
  EXPECT_EQ(Spec(a, "fc.weight/grad"), "float32[1000, 2048]");
  EXPECT_EQ(Spec(a, "loss"), "float32[]");
}

TEST(TrainingGraphTest, TracesReadFromJsonAsThePythonImporterWritesThem) {
  ASSERT_OK_AND_ASSIGN(ModelTrace trace, ModelTraceFromJson(R"({
    "name": "m", "source": "torch.fx",
    "input": [{"name": "x", "spec": {"dtype": "DT_FLOAT32", "shape": [2, 3]}}],
    "parameter": [{"name": "w", "spec": {"dtype": "DT_FLOAT32", "shape": [5, 3]}}],
    "op": [{"kind": "aten::linear", "input": ["x", "w"], "output": ["y"],
            "output_spec": [{"dtype": "DT_FLOAT32", "shape": [2, 5]}],
            "arg": {"k": {"ints": [1, 2]}}}],
    "output": "y"})"));
  EXPECT_EQ(trace.op(0).arg().at("k").ints_size(), 2);
  ASSERT_OK_AND_ASSIGN(GraphDef g, BuildTrainingGraph(trace));
  EXPECT_EQ(Node(g, "linear_0")->op(), "MatMul");
  EXPECT_THAT(ModelTraceFromJson(R"({"name": "m", "nonsense": 1})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model trace JSON")));
  EXPECT_THAT(ModelTraceFromJson("{"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::graph
