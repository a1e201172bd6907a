// File: placement.h
// -----------------------------------------------------------------------------
// Places the training step of one model (a single-rank GraphDef as
// training_graph.h builds it, or as rdmaflow_torch.export_graph writes it)
// on the ranks of a distributed strategy, so that the planner sees the real
// model's tensors cross between ranks:
//
//   ps:servers=S,workers=W       ranks 0..S-1 hold the parameters (each
//                                parameter on one server, largest first onto
//                                the least loaded) and apply the gradients;
//                                worker w (rank S+w) runs a replica "w<w>/"
//                                of the step: parameters cross to it, its
//                                gradients cross back.
//   allreduce:workers=W          W replicas "w<w>/", each with its own
//                                parameters; gradients are all-reduced by the
//                                collective, so nothing crosses in the plan.
//   layer_separated:conv=C,fc=K[,cut=NODE]
//                                conv rank i runs the features of replica
//                                "c<i>/" up to and including NODE (default:
//                                the producer of the first fully connected
//                                layer's input), FC rank C + i % K the rest:
//                                activations and labels cross forward, their
//                                gradient back. The head's parameters live
//                                once per FC rank ("f<k>/"), updated with the
//                                gradients of every replica it serves.
//
// Node names of the model graph must follow training_graph.h's convention
// (a node belongs to the forward node named before its first '/').
#ifndef RDMAFLOW_GRAPH_ANALYZER_PLACEMENT_H_
#define RDMAFLOW_GRAPH_ANALYZER_PLACEMENT_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

struct PlacementSpec {
  std::string strategy;  // "ps", "allreduce" or "layer_separated"
  int servers = 1;       // ps
  int workers = 2;       // ps, allreduce
  int conv_ranks = 2;    // layer_separated
  int fc_ranks = 1;      // layer_separated
  std::string cut;       // layer_separated; empty: before the first FC layer
};

// "ps", "ps:servers=2,workers=4", "layer_separated:conv=3,fc=1,cut=flatten_7".
// kInvalidArgument naming the unknown strategy or key, or the bad value
// (counts are 1..1024).
absl::StatusOr<PlacementSpec> ParsePlacementSpec(absl::string_view text);

// kInvalidArgument when `model` is not on one rank, has no parameters, or
// the cut names no forward node.
absl::StatusOr<GraphDef> PlaceTrainingGraph(const GraphDef& model,
                                            const PlacementSpec& spec);

// The server of each parameter in a ps placement (the rank of its
// "ps/<name>" Variable), by the model's parameter name: what the ps
// strategy shards by. kInvalidArgument when the graph holds no ps
// parameter.
absl::StatusOr<absl::flat_hash_map<std::string, int>> PsParameterServers(
    const GraphDef& placed);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_PLACEMENT_H_
