// File: gradient_order.h
// -----------------------------------------------------------------------------
// When backward completes each parameter's gradient, read from a training
// graph (training_graph.h): the order in which a data-parallel strategy's
// buckets fill, so that it fuses the gradients that are ready together
// (what DDP learns by watching its first backward pass, read here from the
// graph). A parameter's gradient is complete once the last Gradient node
// feeding its "p/grad" ran, in the analyzer's schedule (analyzed_graph.h).
//
//   ASSIGN_OR_RETURN(std::vector<ReadyGradient> order, GradientReadyOrder(model));
//   // order[0]: the parameter whose gradient backward finishes first
#ifndef RDMAFLOW_GRAPH_ANALYZER_GRADIENT_ORDER_H_
#define RDMAFLOW_GRAPH_ANALYZER_GRADIENT_ORDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

// One parameter: its name (the Variable's, as the model names it) and its
// gradient's element count. Value type.
struct ReadyGradient {
  std::string parameter;
  int64_t elements = 0;
};

// Every parameter that gets a gradient ("p/apply" ApplyGradient nodes), in
// the order its gradient completes; parameters completed by the same node
// in the graph's order. Errors: AnalyzeGraph's; kInvalidArgument when the
// graph has no ApplyGradient node.
absl::StatusOr<std::vector<ReadyGradient>> GradientReadyOrder(const GraphDef& training_graph);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_GRADIENT_ORDER_H_
