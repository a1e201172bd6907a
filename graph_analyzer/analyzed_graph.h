// File: analyzed_graph.h
// -----------------------------------------------------------------------------
// AnalyzeGraph: validates a GraphDef and infers every output's spec. The
// result, an AnalyzedGraph, is what partitioning and planning work on: nodes
// with resolved inputs and inferred outputs, a schedule (a topological order),
// and the number of ranks.
//
// Validation errors are kInvalidArgument and name the node and the problem:
// empty or duplicate names, unplaced nodes, ranks out of range, unknown ops,
// wrong input counts, unknown inputs, bad declared shapes (zero or negative
// dimensions), cycles (with the path), dtype and shape mismatches.
#ifndef RDMAFLOW_GRAPH_ANALYZER_ANALYZED_GRAPH_H_
#define RDMAFLOW_GRAPH_ANALYZER_ANALYZED_GRAPH_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

// Ranks at or above this are rejected: per-rank tables stay small, and a typo
// in a rank cannot make the planner allocate gigabytes.
inline constexpr int kMaxWorldSize = 1 << 16;

// An edge's source: output `output` of node `node` (indices into nodes()).
struct OutputId {
  int node = -1;
  int output = 0;

  friend bool operator==(const OutputId& a, const OutputId& b) {
    return a.node == b.node && a.output == b.output;
  }
  template <typename H>
  friend H AbslHashValue(H h, const OutputId& id) {
    return H::combine(std::move(h), id.node, id.output);
  }
};

struct AnalyzedNode {
  int rank = 0;
  std::vector<OutputId> inputs;
  std::vector<TensorSpec> outputs;  // Inferred and merged with declared ones.
  int position = 0;                 // Index in the schedule.
};

// Immutable once built. Thread-compatible (const methods may be called
// concurrently).
class AnalyzedGraph {
 public:
  const GraphDef& graph() const { return graph_; }
  const NodeDef& def(int node) const { return graph_.node(node); }
  absl::Span<const AnalyzedNode> nodes() const { return nodes_; }
  const AnalyzedNode& node(int i) const { return nodes_[i]; }
  // Node indices in execution order: every node after its inputs; among
  // nodes ready together, the one listed first in the GraphDef first.
  absl::Span<const int> schedule() const { return schedule_; }
  int world_size() const { return world_size_; }
  const TensorSpec& spec(OutputId id) const {
    return nodes_[id.node].outputs[id.output];
  }
  // The index of the node called `name`, or -1.
  int Find(absl::string_view name) const;

 private:
  friend absl::StatusOr<AnalyzedGraph> AnalyzeGraph(GraphDef graph);

  GraphDef graph_;
  std::vector<AnalyzedNode> nodes_;
  std::vector<int> schedule_;
  int world_size_ = 0;
  absl::flat_hash_map<std::string, int> index_;
};

// Validates `graph` and infers shapes. See the file comment for the errors.
absl::StatusOr<AnalyzedGraph> AnalyzeGraph(GraphDef graph);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_ANALYZED_GRAPH_H_
