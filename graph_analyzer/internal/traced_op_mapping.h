// File: internal/traced_op_mapping.h
// -----------------------------------------------------------------------------
// One traced op (model_trace.proto) as analyzer nodes: the ops whose meaning
// the analyzer knows ("aten::linear" -> MatMul + Add, "aten::conv2d" ->
// Conv2D + BiasAdd, pooling, reshapes, elementwise ops, ...) become those
// nodes, but only where the analyzer's shape functions give back exactly the
// traced outputs; anything else is carried as an `Opaque` node with the
// traced outputs, never refused. Not part of the API (training_graph.h).
#ifndef RDMAFLOW_GRAPH_ANALYZER_INTERNAL_TRACED_OP_MAPPING_H_
#define RDMAFLOW_GRAPH_ANALYZER_INTERNAL_TRACED_OP_MAPPING_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"

namespace rdmaflow::graph::internal {

// A traced tensor an op reads: its reference in the graph being built
// ("node:k") and its spec.
struct MappedInput {
  std::string ref;
  TensorSpec spec;
};

struct MappedOp {
  // In order; the last one produces the op's outputs (one per traced output).
  std::vector<NodeDef> nodes;
};

// "aten::relu_" -> "relu": the name after the namespace, without the
// trailing underscore of an in-place variant.
std::string ShortKind(absl::string_view kind);

// The nodes for `op`, named `name` (and `name`/<suffix> for helpers), with
// declared outputs. `inputs` are the op's tensor inputs, in order.
MappedOp MapTracedOp(const TracedOp& op, const std::vector<MappedInput>& inputs,
                     const std::string& name);

}  // namespace rdmaflow::graph::internal

#endif  // RDMAFLOW_GRAPH_ANALYZER_INTERNAL_TRACED_OP_MAPPING_H_
