// File: small_traces.cc
#include "graph_analyzer/testing/small_traces.h"

#include "absl/status/statusor.h"
#include "google/protobuf/text_format.h"
#include "graph_analyzer/training_graph.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph::testing {
namespace {

ModelTrace Parse(const char* text) {
  ModelTrace trace;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &trace)) << text;
  return trace;
}

}  // namespace

ModelTrace SmallMlpTrace() {
  return Parse(R"pb(
    name: "mlp" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [8, 20] } }
    parameter { name: "fc1.weight" spec { dtype: DT_FLOAT32 shape: [16, 20] } }
    parameter { name: "fc1.bias" spec { dtype: DT_FLOAT32 shape: [16] } }
    parameter { name: "fc2.weight" spec { dtype: DT_FLOAT32 shape: [4, 16] } }
    parameter { name: "fc2.bias" spec { dtype: DT_FLOAT32 shape: [4] } }
    op { kind: "aten::linear" input: ["x", "fc1.weight", "fc1.bias"]
         output: "h" output_spec { dtype: DT_FLOAT32 shape: [8, 16] } }
    op { kind: "aten::relu_" input: "h"
         output: "r" output_spec { dtype: DT_FLOAT32 shape: [8, 16] } }
    op { kind: "aten::linear" input: ["r", "fc2.weight", "fc2.bias"]
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [8, 4] } }
    output: "y"
  )pb");
}

ModelTrace SmallCnnTrace(bool scaled) {
  ModelTrace trace = Parse(R"pb(
    name: "cnn" source: "test"
    input { name: "x" spec { dtype: DT_FLOAT32 shape: [8, 1, 6, 6] } }
    parameter { name: "conv.weight" spec { dtype: DT_FLOAT32 shape: [2, 1, 3, 3] } }
    parameter { name: "conv.bias" spec { dtype: DT_FLOAT32 shape: [2] } }
    parameter { name: "fc.weight" spec { dtype: DT_FLOAT32 shape: [3, 32] } }
    parameter { name: "fc.bias" spec { dtype: DT_FLOAT32 shape: [3] } }
    op { kind: "aten::conv2d" input: ["x", "conv.weight", "conv.bias"]
         arg { key: "stride" value { ints: [1, 1] } }
         arg { key: "padding" value { ints: [0, 0] } }
         output: "c" output_spec { dtype: DT_FLOAT32 shape: [8, 2, 4, 4] } }
    op { kind: "aten::relu" input: "c"
         output: "r" output_spec { dtype: DT_FLOAT32 shape: [8, 2, 4, 4] } }
    op { kind: "aten::flatten" input: "r" arg { key: "start_dim" value { i: 1 } }
         output: "f" output_spec { dtype: DT_FLOAT32 shape: [8, 32] } }
    op { kind: "aten::linear" input: ["f", "fc.weight", "fc.bias"]
         output: "y" output_spec { dtype: DT_FLOAT32 shape: [8, 3] } }
    output: "y"
  )pb");
  if (scaled) {
    EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(R"pb(
      buffer { name: "scale" spec { dtype: DT_FLOAT32 shape: [3] } }
      op { kind: "aten::mul" input: ["y", "scale"]
           output: "z" output_spec { dtype: DT_FLOAT32 shape: [8, 3] } }
      output: "z"
    )pb", &trace));
  }
  return trace;
}

GraphDef TrainingGraphOf(const ModelTrace& trace) {
  absl::StatusOr<GraphDef> g = BuildTrainingGraph(trace);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : GraphDef();
}

}  // namespace rdmaflow::graph::testing
