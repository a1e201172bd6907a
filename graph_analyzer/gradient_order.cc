// File: gradient_order.cc
#include "graph_analyzer/gradient_order.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {

absl::StatusOr<std::vector<ReadyGradient>> GradientReadyOrder(const GraphDef& training_graph) {
  ASSIGN_OR_RETURN(AnalyzedGraph analyzed, AnalyzeGraph(training_graph));
  struct Entry {
    int ready = 0;  // schedule position of the node completing the gradient
    int listed = 0;
    ReadyGradient gradient;
  };
  std::vector<Entry> entries;
  for (int i = 0; i < static_cast<int>(analyzed.nodes().size()); ++i) {
    if (analyzed.def(i).op() != "ApplyGradient") continue;
    const AnalyzedNode& apply = analyzed.node(i);
    if (apply.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ApplyGradient '", analyzed.def(i).name(), "' has no gradient input"));
    }
    const OutputId variable = apply.inputs[0];
    const OutputId total = apply.inputs[1];
    // "p/grad" is an Identity or AddN of what backward produced: complete
    // when the last of its inputs' producers ran (itself when it has none).
    int ready = analyzed.node(total.node).position;
    if (!analyzed.node(total.node).inputs.empty()) {
      ready = 0;
      for (const OutputId& part : analyzed.node(total.node).inputs) {
        ready = std::max(ready, analyzed.node(part.node).position);
      }
    }
    const std::optional<int64_t> elements = NumElements(analyzed.spec(variable).shape());
    if (!elements.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", analyzed.def(variable.node).name(),
          "' has no known size (an unknown dimension, or more than 2^63 elements)"));
    }
    entries.push_back({ready, static_cast<int>(entries.size()),
                       {analyzed.def(variable.node).name(), *elements}});
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        "the graph updates no parameter (no ApplyGradient node): is it a training graph?");
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.ready < b.ready; });
  std::vector<ReadyGradient> order;
  for (Entry& e : entries) order.push_back(std::move(e.gradient));
  return order;
}

}  // namespace rdmaflow::graph
