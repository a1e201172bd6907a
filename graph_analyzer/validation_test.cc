// File: validation_test.cc
// Every validation error names the node and the problem; malformed text gets
// the parser's line and column.
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// Parses a GraphDef from text (which must be well-formed) and analyzes it.
absl::StatusOr<AnalyzedGraph> Analyze(const std::string& text) {
  GraphDef graph;
  absl::Status parsed = ParseTextProto(text, "test.pbtxt", &graph);
  if (!parsed.ok()) return parsed;
  return AnalyzeGraph(std::move(graph));
}

absl::Status Error(const std::string& text) { return Analyze(text).status(); }

constexpr char kSourceX[] = R"pb(
  node {
    name: "x"
    op: "Placeholder"
    output { dtype: DT_FLOAT32 shape: [ 4, 8 ] }
    rank: 0
  }
)pb";

TEST(ValidationTest, AcceptsAWellFormedGraph) {
  std::string text = std::string(kSourceX) + R"pb(
    node { name: "y" op: "Relu" input: "x" rank: 1 }
  )pb";
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph g, Analyze(text));
  EXPECT_EQ(g.world_size(), 2);
  EXPECT_EQ(g.schedule().size(), 2u);
}

TEST(ValidationTest, UnknownInput) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "y" op: "Relu" input: "z:0" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'y' (op Relu): input 'z:0' names "
                                 "unknown node 'z'")));
}

TEST(ValidationTest, InputOutputIndexOutOfRange) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "y" op: "Relu" input: "x:1" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'y' (op Relu): input 'x:1': node 'x' "
                                 "(op Placeholder) has 1 output(s)")));
}

TEST(ValidationTest, MalformedInputReference) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "y" op: "Relu" input: "x:one" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("malformed tensor reference 'x:one'")));
}

TEST(ValidationTest, CycleIsReportedWithItsPath) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "a" op: "Add" input: "x" input: "c" rank: 0 }
                node { name: "b" op: "Relu" input: "a" rank: 0 }
                node { name: "c" op: "Relu" input: "b" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cycle: a -> b -> c -> a")));
}

TEST(ValidationTest, SelfLoop) {
  EXPECT_THAT(Error(R"pb(node { name: "a" op: "Relu" input: "a" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cycle: a -> a")));
}

TEST(ValidationTest, DtypeMismatch) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node {
                  name: "i"
                  op: "Placeholder"
                  output { dtype: DT_INT32 shape: [ 4, 8 ] }
                  rank: 0
                }
                node { name: "sum" op: "Add" input: "x" input: "i" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'sum' (op Add): dtype mismatch")));
}

TEST(ValidationTest, UnplacedNode) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "y" op: "Relu" input: "x" }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'y' (op Relu): is not placed")));
}

TEST(ValidationTest, RankOutsideTheWorld) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                world_size: 2
                node { name: "y" op: "Relu" input: "x" rank: 2 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 2 is outside the world of 2 ranks")));
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "y" op: "Relu" input: "x" rank: -1 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'y' (op Relu): rank -1 is not in")));
}

TEST(ValidationTest, NegativeDimension) {
  EXPECT_THAT(Error(R"pb(
                node {
                  name: "x"
                  op: "Placeholder"
                  output { dtype: DT_FLOAT32 shape: [ 4, -2 ] }
                  rank: 0
                }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'x' (op Placeholder): declared output "
                                 "0: dimension 1 of [4, -2] is negative")));
}

TEST(ValidationTest, ZeroSizeDimension) {
  EXPECT_THAT(Error(R"pb(
                node {
                  name: "x"
                  op: "Placeholder"
                  output { dtype: DT_FLOAT32 shape: [ 0, 8 ] }
                  rank: 0
                }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 0 of [0, 8] is zero")));
}

TEST(ValidationTest, MissingDtype) {
  EXPECT_THAT(Error(R"pb(
                node {
                  name: "x"
                  op: "Placeholder"
                  output { shape: [ 8 ] }
                  rank: 0
                }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("invalid dtype")));
}

TEST(ValidationTest, DuplicateNames) {
  EXPECT_THAT(Error(std::string(kSourceX) + kSourceX),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duplicate node name 'x' (nodes #0 and #1)")));
}

TEST(ValidationTest, BadNames) {
  EXPECT_THAT(Error(R"pb(node { op: "Relu" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node #0 (op Relu) has no name")));
  EXPECT_THAT(Error(R"pb(node { name: "a:b" op: "Relu" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("may not contain ':'")));
  EXPECT_THAT(Error(R"pb(node { name: "_recv/x/0" op: "Relu" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reserved")));
}

TEST(ValidationTest, UnknownOpListsTheKnownOnes) {
  EXPECT_THAT(Error(R"pb(node { name: "a" op: "Frobnicate" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'a' (op Frobnicate): unknown op "
                                 "'Frobnicate'; known ops: Add, AddN")));
}

TEST(ValidationTest, WrongInputCount) {
  EXPECT_THAT(Error(std::string(kSourceX) + R"pb(
                node { name: "m" op: "MatMul" input: "x" rank: 0 }
              )pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 'm' (op MatMul): takes 2 input(s), "
                                 "got 1")));
}

TEST(ValidationTest, SourceWithoutDeclaredOutput) {
  EXPECT_THAT(Error(R"pb(node { name: "x" op: "Placeholder" rank: 0 })pb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must declare exactly one output")));
}

TEST(ValidationTest, AttributeOfTheWrongKind) {
  EXPECT_THAT(
      Error(std::string(kSourceX) + R"pb(
        node {
          name: "c"
          op: "Concat"
          input: "x"
          attr {
            key: "axis"
            value { s: "one" }
          }
          rank: 0
        }
      )pb"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("attribute 'axis' must be int (i), got string (s)")));
}

TEST(TextIoTest, MalformedTextGetsLineAndColumn) {
  GraphDef graph;
  absl::Status status = ParseTextProto(
      "node {\n  name: \"x\"\n  op: Relu\n}\n", "bad.pbtxt", &graph);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("bad.pbtxt:3:")));
  status = ParseTextProto("node { nmae: \"x\" }", "typo.pbtxt", &graph);
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("typo.pbtxt:1:12: Message type "
                                 "\"rdmaflow.graph.NodeDef\" has no field "
                                 "named \"nmae\"")));
}

TEST(TextIoTest, MissingFileIsNotFound) {
  GraphDef graph;
  EXPECT_THAT(ReadTextProto("/nonexistent/graph.pbtxt", &graph),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/graph.pbtxt")));
}

}  // namespace
}  // namespace rdmaflow::graph
