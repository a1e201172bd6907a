// File: torchscript_import.h
// -----------------------------------------------------------------------------
// Reads a TorchScript file (a module saved after torch.jit.trace or
// torch.jit.script) and the sizes of its inputs into the ModelTrace of one
// forward pass (graph_analyzer/model_trace.proto), and from there into the
// GraphDef of its training step (graph_analyzer/training_graph.h): every
// parameter, activation and gradient, with its dtype and shape. The only
// part of graph_analyzer/ that links LibTorch.
//
// Shapes come from running the graph once, op by op, on zero tensors of the
// given sizes (no gradients): every op LibTorch can run is traced, whatever
// the analyzer knows of it. Calls (submodules) are inlined first; the
// parameters and buffers keep their qualified names. Ops that only update
// state (a batch norm's counter) are left out, as are ops on constants.
// A scripted module's if is decided for the given inputs when its condition
// depends only on attributes, shapes and types (BatchNorm's `training`,
// nn.TransformerEncoderLayer's fast-path checks), as torch.export
// specializes: the branch taken is traced; a loop whose trip count and
// condition are of that kind is unrolled (the k-th pass's tensors named
// "%x@k"). torch.is_grad_enabled() is true there (the graph is of a
// training step). A branch or loop on a tensor's values is refused: trace
// the module.
//
//   ASSIGN_OR_RETURN(GraphDef graph, ImportTorchScript(
//       "model.pt", {MakeSpec(DT_FLOAT32, {64, 1, 28, 28})}));
#ifndef RDMAFLOW_GRAPH_ANALYZER_TORCH_TORCHSCRIPT_IMPORT_H_
#define RDMAFLOW_GRAPH_ANALYZER_TORCH_TORCHSCRIPT_IMPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"
#include "graph_analyzer/training_graph.h"
#include "torch/script.h"

namespace rdmaflow::graph {

// torch::jit::load, its exceptions as a Status: kNotFound for a path that is
// no regular file, kInvalidArgument (LibTorch's message) for one that is
// no TorchScript module.
absl::StatusOr<torch::jit::Module> LoadTorchScript(const std::string& path);

// kNotFound for a missing file; kInvalidArgument when it is not TorchScript,
// has no forward(), takes another number of inputs, fails to run on inputs
// of these sizes (LibTorch's message, with the op), branches or loops on a
// tensor's values, or
// returns anything but one tensor.
absl::StatusOr<ModelTrace> TraceTorchScript(const std::string& path,
                                            const std::vector<TensorSpec>& inputs);

// TraceTorchScript, then BuildTrainingGraph.
absl::StatusOr<GraphDef> ImportTorchScript(const std::string& path,
                                           const std::vector<TensorSpec>& inputs,
                                           const TrainingGraphOptions& options = {});

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TORCH_TORCHSCRIPT_IMPORT_H_
