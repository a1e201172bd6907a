// File: training_graph.h
// -----------------------------------------------------------------------------
// The GraphDef of one training step, built from a traced forward pass
// (model_trace.proto) of a real model: what the importers of a PyTorch model
// (TorchScript: graph_analyzer/torch; torch.fx: rdmaflow_torch.export_graph)
// end in, so that both give the same graph for the same model.
//
//   - inputs are Placeholders ("input", or "input0", "input1", ...), the
//     parameters Variables and the buffers Consts, named as in the module
//     ("layer1.0.conv1.weight");
//   - each traced op becomes "<op>_<i>" (i counts the ops, "linear_3"): the
//     analyzer's own ops where it knows the op and its shape functions give
//     back the traced shapes (internal/traced_op_mapping.h), an `Opaque`
//     node carrying the traced outputs otherwise;
//   - the loss: "loss" = SoftmaxCrossEntropy(output, "labels" int64 [N]) for
//     an output [N, C], ReduceMean of the output for any other;
//   - backward: "<op>_<i>/grad" (Gradient) for every op a parameter's
//     gradient flows through, its outputs the gradients of the op's inputs
//     that need one; gradients of a tensor read by several ops are summed
//     ("<node>/grad_sum" for its output 0, "<node>/grad_sum_<k>" for output
//     k; AddN);
//   - every node's name starts with the forward node it belongs to (a
//     parameter, an input, an op, "loss"), then "/" and what it is
//     ("linear_0/bias", "linear_0/grad"): placement.h relies on that;
//   - per parameter p: "p/grad" (the gradient, an Identity or the sum) and
//     "p/apply" (ApplyGradient).
// Every node is on `rank`. Node names are made unique (a suffix "_" where a
// parameter's name collides with a generated one).
#ifndef RDMAFLOW_GRAPH_ANALYZER_TRAINING_GRAPH_H_
#define RDMAFLOW_GRAPH_ANALYZER_TRAINING_GRAPH_H_

#include <string>

#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"

namespace rdmaflow::graph {

struct TrainingGraphOptions {
  int rank = 0;
};

// kInvalidArgument naming the op or tensor when the trace is inconsistent:
// a tensor read before it is produced or never produced, a name defined
// twice, an op whose outputs and specs differ in number, no inputs, no
// parameters, or an output that is not a tensor of the trace.
absl::StatusOr<GraphDef> BuildTrainingGraph(const ModelTrace& trace,
                                            const TrainingGraphOptions& options = {});

// Parses the JSON form of a ModelTrace (protobuf's JSON mapping), as the
// Python importer writes it. kInvalidArgument with the parser's message.
absl::StatusOr<ModelTrace> ModelTraceFromJson(const std::string& json);

// The names BuildTrainingGraph gives a parameter's gradient tensor and its
// update node ("fc1.weight/grad:0", "fc1.weight/apply") when the parameter
// needs no renaming.
std::string ParameterGradient(const std::string& parameter);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TRAINING_GRAPH_H_
