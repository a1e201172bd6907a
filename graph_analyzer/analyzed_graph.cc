// File: analyzed_graph.cc
#include "graph_analyzer/analyzed_graph.h"

#include "common/status_macros.h"
#include "graph_analyzer/internal/structure.h"

namespace rdmaflow::graph {

int AnalyzedGraph::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

absl::StatusOr<AnalyzedGraph> AnalyzeGraph(GraphDef graph) {
  ASSIGN_OR_RETURN(internal::Structure s, internal::CheckStructure(graph));
  RETURN_IF_ERROR(internal::InferShapes(graph, s.schedule, s.nodes));
  AnalyzedGraph result;
  result.graph_ = std::move(graph);
  result.nodes_ = std::move(s.nodes);
  result.schedule_ = std::move(s.schedule);
  result.world_size_ = s.world_size;
  result.index_ = std::move(s.index);
  return result;
}

}  // namespace rdmaflow::graph
