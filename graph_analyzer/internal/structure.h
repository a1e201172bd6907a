// File: internal/structure.h
// -----------------------------------------------------------------------------
// The two halves of AnalyzeGraph: structural checks (names, placement, ops,
// inputs, cycles; produces the schedule) and shape inference along the
// schedule. Not part of the API; see analyzed_graph.h for the errors.
#ifndef RDMAFLOW_GRAPH_ANALYZER_INTERNAL_STRUCTURE_H_
#define RDMAFLOW_GRAPH_ANALYZER_INTERNAL_STRUCTURE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph_analyzer/analyzed_graph.h"

namespace rdmaflow::graph::internal {

struct Structure {
  std::vector<AnalyzedNode> nodes;  // rank, inputs and position filled in.
  std::vector<int> schedule;
  int world_size = 0;
  absl::flat_hash_map<std::string, int> index;
};

absl::StatusOr<Structure> CheckStructure(const GraphDef& graph);

// Fills `nodes[i].outputs` for every node, visiting `schedule` in order.
absl::Status InferShapes(const GraphDef& graph, const std::vector<int>& schedule,
                         std::vector<AnalyzedNode>& nodes);

}  // namespace rdmaflow::graph::internal

#endif  // RDMAFLOW_GRAPH_ANALYZER_INTERNAL_STRUCTURE_H_
