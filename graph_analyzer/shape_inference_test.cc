// File: shape_inference_test.cc
// Shape inference per op, with known and unknown (-1) dimensions, and the
// errors each op reports for inputs or attributes that do not fit.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/shape_util.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TensorSpec F(std::vector<int64_t> shape) {
  return MakeSpec(DT_FLOAT32, std::move(shape));
}
TensorSpec I64(std::vector<int64_t> shape) {
  return MakeSpec(DT_INT64, std::move(shape));
}

// Feeds `inputs` through Placeholders into one `op` node (attributes set by
// `attrs`) and returns its outputs as "float32[2, 3]; float32[4]".
absl::StatusOr<std::string> Infer(
    const std::string& op, const std::vector<TensorSpec>& inputs,
    const std::function<void(NodeBuilder&)>& attrs = nullptr) {
  GraphBuilder b("t");
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int64_t> shape(inputs[i].shape().begin(),
                               inputs[i].shape().end());
    names.push_back(
        b.Placeholder(absl::StrCat("in", i), inputs[i].dtype(), shape));
  }
  NodeBuilder node = b.Op("node", op, names);
  if (attrs) attrs(node);
  absl::StatusOr<AnalyzedGraph> g = AnalyzeGraph(std::move(b).Build());
  if (!g.ok()) return g.status();
  std::vector<std::string> specs;
  for (const TensorSpec& s : g->node(g->Find("node")).outputs) {
    specs.push_back(SpecString(s));
  }
  return absl::StrJoin(specs, "; ");
}

TEST(ShapeInferenceTest, MatMul) {
  EXPECT_THAT(Infer("MatMul", {F({32, 784}), F({784, 10})}),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("MatMul", {F({-1, 784}), F({784, 10})}),
              IsOkAndHolds("float32[-1, 10]"));
  EXPECT_THAT(Infer("MatMul", {F({8, -1, 256}), F({256, 512})}),
              IsOkAndHolds("float32[8, -1, 512]"));
  EXPECT_THAT(Infer("MatMul", {F({784, 32}), F({10, 784})},
                    [](NodeBuilder& n) {
                      n.Attr("transpose_a", true).Attr("transpose_b", true);
                    }),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("MatMul", {F({32, 784}), F({783, 10})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inner dimensions differ")));
  EXPECT_THAT(Infer("MatMul", {F({32}), F({32, 10})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank >= 2")));
}

TEST(ShapeInferenceTest, MatMulDtypeMismatchNamesBothInputs) {
  EXPECT_THAT(
      Infer("MatMul", {F({2, 3}), MakeSpec(DT_FLOAT16, {3, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("node 'node' (op MatMul): dtype mismatch: input 0 is "
                         "float32[2, 3], input 1 (in1:0) is float16[3, 4]")));
}

TEST(ShapeInferenceTest, Conv2D) {
  auto same = [](NodeBuilder& n) { n.Attr("padding", "SAME"); };
  EXPECT_THAT(Infer("Conv2D", {F({32, 3, 32, 32}), F({64, 3, 3, 3})}, same),
              IsOkAndHolds("float32[32, 64, 32, 32]"));
  EXPECT_THAT(Infer("Conv2D", {F({32, 3, 32, 32}), F({64, 3, 3, 3})}),
              IsOkAndHolds("float32[32, 64, 30, 30]"));
  EXPECT_THAT(Infer("Conv2D", {F({32, 3, 224, 224}), F({64, 3, 7, 7})},
                    [](NodeBuilder& n) {
                      n.Attr("strides", std::vector<int64_t>{2, 2})
                          .Attr("pads", std::vector<int64_t>{3, 3});
                    }),
              IsOkAndHolds("float32[32, 64, 112, 112]"));
  EXPECT_THAT(Infer("Conv2D", {F({-1, 3, -1, 32}), F({64, 3, 3, 3})}, same),
              IsOkAndHolds("float32[-1, 64, -1, 32]"));
  EXPECT_THAT(Infer("Conv2D", {F({32, 4, 32, 32}), F({64, 3, 3, 3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input channels differ")));
  EXPECT_THAT(Infer("Conv2D", {F({32, 3, 2, 2}), F({64, 3, 3, 3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not fit")));
  EXPECT_THAT(Infer("Conv2D", {F({32, 3, 8, 8}), F({64, 3, 3, 3})},
                    [](NodeBuilder& n) { n.Attr("padding", "FULL"); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'padding'")));
}

TEST(ShapeInferenceTest, Pooling) {
  auto k2 = [](NodeBuilder& n) {
    n.Attr("ksize", std::vector<int64_t>{2, 2});
  };
  EXPECT_THAT(Infer("MaxPool", {F({32, 64, 32, 32})}, k2),
              IsOkAndHolds("float32[32, 64, 16, 16]"));
  EXPECT_THAT(Infer("AvgPool", {F({-1, 64, 7, -1})}, k2),
              IsOkAndHolds("float32[-1, 64, 3, -1]"));
  EXPECT_THAT(Infer("MaxPool", {F({1, 1, 5, 5})},
                    [](NodeBuilder& n) {
                      n.Attr("ksize", std::vector<int64_t>{3, 3})
                          .Attr("strides", std::vector<int64_t>{1, 1});
                    }),
              IsOkAndHolds("float32[1, 1, 3, 3]"));
  EXPECT_THAT(Infer("MaxPool", {F({32, 64, 32, 32})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing required attribute 'ksize'")));
  EXPECT_THAT(Infer("MaxPool", {F({32, 64, 32, 32})},
                    [](NodeBuilder& n) { n.Attr("ksize", 2); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be int list (ints), got int (i)")));
}

TEST(ShapeInferenceTest, BiasAddAndElementwise) {
  EXPECT_THAT(Infer("BiasAdd", {F({32, 64, 8, 8}), F({64})}),
              IsOkAndHolds("float32[32, 64, 8, 8]"));
  EXPECT_THAT(Infer("BiasAdd", {F({32, -1}), F({10})}),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("BiasAdd", {F({32, 9}), F({10})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not match 9 channels")));
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Identity", "Softmax"}) {
    EXPECT_THAT(Infer(op, {F({-1, 10})}), IsOkAndHolds("float32[-1, 10]"))
        << op;
  }
}

TEST(ShapeInferenceTest, BroadcastingBinaryOps) {
  EXPECT_THAT(Infer("Add", {F({32, 10}), F({10})}),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("Mul", {F({32, 1, 5}), F({4, 1})}),
              IsOkAndHolds("float32[32, 4, 5]"));
  EXPECT_THAT(Infer("Sub", {F({-1, 10}), F({32, 1})}),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("Add", {F({-1, 10}), F({1, 10})}),
              IsOkAndHolds("float32[-1, 10]"));
  EXPECT_THAT(Infer("Add", {F({3, 10}), F({4, 10})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("do not broadcast")));
  EXPECT_THAT(Infer("AddN", {F({-1, 10}), F({32, 10}), F({32, -1})}),
              IsOkAndHolds("float32[32, 10]"));
  EXPECT_THAT(Infer("AddN", {F({32, 10}), F({32, 11})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AddN needs inputs of one shape")));
}

TEST(ShapeInferenceTest, Reshape) {
  auto to = [](std::vector<int64_t> shape) {
    return [shape](NodeBuilder& n) { n.Attr("shape", shape); };
  };
  EXPECT_THAT(Infer("Reshape", {F({32, 4, 4, 256})}, to({32, -1})),
              IsOkAndHolds("float32[32, 4096]"));
  EXPECT_THAT(Infer("Reshape", {F({32, 4096})}, to({32, 16, 256})),
              IsOkAndHolds("float32[32, 16, 256]"));
  // An unknown input size leaves the inferred dimension unknown.
  EXPECT_THAT(Infer("Reshape", {F({-1, 4, 256})}, to({-1, 256})),
              IsOkAndHolds("float32[-1, 256]"));
  EXPECT_THAT(Infer("Reshape", {F({32, 10})}, to({33, -1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot reshape")));
  EXPECT_THAT(Infer("Reshape", {F({32, 10})}, to({-1, -1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than one -1")));
  EXPECT_THAT(Infer("Reshape", {F({32, 10})}, to({0, 320})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not in 1 .. 2^40")));
}

TEST(ShapeInferenceTest, Flatten) {
  EXPECT_THAT(Infer("Flatten", {F({32, 256, 4, 4})}),
              IsOkAndHolds("float32[32, 4096]"));
  EXPECT_THAT(Infer("Flatten", {F({-1, 256, 4, 4})}),
              IsOkAndHolds("float32[-1, 4096]"));
  EXPECT_THAT(Infer("Flatten", {F({32, 256, -1, 4})}),
              IsOkAndHolds("float32[32, -1]"));
  EXPECT_THAT(Infer("Flatten", {F({2, 3, 4})},
                    [](NodeBuilder& n) { n.Attr("axis", 2); }),
              IsOkAndHolds("float32[6, 4]"));
  EXPECT_THAT(Infer("Flatten", {F({2, 3})},
                    [](NodeBuilder& n) { n.Attr("axis", 5); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out of range")));
}

TEST(ShapeInferenceTest, ConcatAndSplit) {
  auto axis = [](int a) { return [a](NodeBuilder& n) { n.Attr("axis", a); }; };
  EXPECT_THAT(Infer("Concat", {F({32, 10}), F({32, 20})}, axis(1)),
              IsOkAndHolds("float32[32, 30]"));
  EXPECT_THAT(Infer("Concat", {F({-1, 10}), F({32, 20})}, axis(-1)),
              IsOkAndHolds("float32[32, 30]"));
  EXPECT_THAT(Infer("Concat", {F({8, 10}), F({-1, 10})}, axis(0)),
              IsOkAndHolds("float32[-1, 10]"));
  EXPECT_THAT(Infer("Concat", {F({32, 10}), F({31, 20})}, axis(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 0 differs")));
  EXPECT_THAT(Infer("Concat", {F({32, 10}), F({32, 20})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing required attribute 'axis'")));
  EXPECT_THAT(Infer("Split", {F({32, 30})},
                    [](NodeBuilder& n) {
                      n.Attr("axis", 1).Attr("num_split", 3);
                    }),
              IsOkAndHolds("float32[32, 10]; float32[32, 10]; float32[32, 10]"));
  EXPECT_THAT(Infer("Split", {F({32, 30})},
                    [](NodeBuilder& n) {
                      n.Attr("axis", 1).Attr("sizes",
                                             std::vector<int64_t>{10, 20});
                    }),
              IsOkAndHolds("float32[32, 10]; float32[32, 20]"));
  EXPECT_THAT(Infer("Split", {F({-1, 30})},
                    [](NodeBuilder& n) {
                      n.Attr("axis", 0).Attr("num_split", 2);
                    }),
              IsOkAndHolds("float32[-1, 30]; float32[-1, 30]"));
  EXPECT_THAT(Infer("Split", {F({32, 30})},
                    [](NodeBuilder& n) {
                      n.Attr("axis", 1).Attr("num_split", 4);
                    }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not split into 4 equal parts")));
}

TEST(ShapeInferenceTest, Reductions) {
  EXPECT_THAT(Infer("ReduceSum", {F({32, 10})}), IsOkAndHolds("float32[]"));
  EXPECT_THAT(Infer("ReduceMean", {F({32, -1, 512})},
                    [](NodeBuilder& n) {
                      n.Attr("axes", std::vector<int64_t>{1});
                    }),
              IsOkAndHolds("float32[32, 512]"));
  EXPECT_THAT(Infer("ReduceSum", {F({32, -1, 512})},
                    [](NodeBuilder& n) {
                      n.Attr("axes", std::vector<int64_t>{-1})
                          .Attr("keep_dims", true);
                    }),
              IsOkAndHolds("float32[32, -1, 1]"));
  EXPECT_THAT(Infer("ReduceSum", {F({32, 10})},
                    [](NodeBuilder& n) {
                      n.Attr("axes", std::vector<int64_t>{1, -1});
                    }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("twice")));
}

TEST(ShapeInferenceTest, CrossEntropy) {
  EXPECT_THAT(Infer("SoftmaxCrossEntropy", {F({32, 10}), I64({32})}),
              IsOkAndHolds("float32[]"));
  EXPECT_THAT(Infer("SoftmaxCrossEntropy", {F({-1, 10}), F({-1, 10})}),
              IsOkAndHolds("float32[]"));
  EXPECT_THAT(Infer("SoftmaxCrossEntropy", {F({32, 10}), F({32})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be int32 or int64")));
  EXPECT_THAT(Infer("SoftmaxCrossEntropy", {F({32, 10}), I64({16})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch sizes differ")));
}

TEST(ShapeInferenceTest, GradientsTakeTheirForwardInputsSpecs) {
  EXPECT_THAT(Infer("Gradient", {F({784, 10}), F({-1, 10}), F({})}),
              IsOkAndHolds("float32[784, 10]"));
  EXPECT_THAT(Infer("Gradient", {F({784, 10}), F({-1, 10}), F({})},
                    [](NodeBuilder& n) { n.Attr("wrt", 2); }),
              IsOkAndHolds("float32[784, 10]; float32[-1, 10]"));
  EXPECT_THAT(Infer("Gradient", {F({2})},
                    [](NodeBuilder& n) { n.Attr("wrt", 2); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'wrt' (2) must be in 1 .. 1")));
  EXPECT_THAT(Infer("ApplyGradient", {F({784, 10}), F({784, 10})}),
              IsOkAndHolds("float32[784, 10]"));
  EXPECT_THAT(Infer("ApplyGradient", {F({784, 10}), F({10, 784})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not match parameter")));
}

TEST(ShapeInferenceTest, DeclaredOutputRefinesAnUnknownDimension) {
  GraphBuilder b("t");
  std::string x = b.Placeholder("x", DT_FLOAT32, {-1, 10});
  b.Op("y", "Relu", {x}).Output(DT_FLOAT32, {32, 10});
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, AnalyzeGraph(std::move(b).Build()));
  EXPECT_EQ(SpecString(g.node(g.Find("y")).outputs[0]), "float32[32, 10]");
}

TEST(ShapeInferenceTest, DeclaredOutputContradictingInferenceIsAnError) {
  GraphBuilder b("t");
  std::string x = b.Placeholder("x", DT_FLOAT32, {32, 10});
  b.Op("y", "Relu", {x}).Output(DT_FLOAT32, {32, 11});
  EXPECT_THAT(AnalyzeGraph(std::move(b).Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'y' (op Relu): declared output 0 "
                                 "float32[32, 11] contradicts the inferred "
                                 "float32[32, 10]")));
}

TEST(ShapeInferenceTest, SendHasNoOutputsAndRecvDeclaresOne) {
  GraphBuilder b("t");
  b.Op("r", "Recv").Output(DT_FLOAT32, {4});
  b.Op("s", "Send", {"r"});
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, AnalyzeGraph(std::move(b).Build()));
  EXPECT_EQ(g.node(g.Find("r")).outputs.size(), 1u);
  EXPECT_TRUE(g.node(g.Find("s")).outputs.empty());
}

}  // namespace
}  // namespace rdmaflow::graph
