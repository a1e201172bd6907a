// File: export_import.h
// -----------------------------------------------------------------------------
// Reads a torch.export program (a .pt2 file from torch.export.save; see
// exported_program.h) into the ModelTrace of one forward pass, and from
// there into the GraphDef of its training step, as the TorchScript importer
// does for a .pt file: every parameter, activation and gradient, with its
// dtype and shape.
//
// Shapes come from running the program once, op by op, on zero tensors: of
// the sizes given, or of the example the program was exported with (a
// dynamic dimension takes the given size; the program's guards are not
// checked, so a static one that differs fails only at an op that minds,
// named in the error). The
// parameters and buffers keep their module names ("fc.weight"). Ops that
// only update state (a batch norm's counter) are left out; aten::convolution
// (core ATen) becomes aten::conv<N>d.
//
//   ASSIGN_OR_RETURN(GraphDef graph, ImportExportedProgram("model.pt2", {}));
#ifndef RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORT_IMPORT_H_
#define RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORT_IMPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"
#include "graph_analyzer/training_graph.h"

namespace rdmaflow::graph {

// True for a path ending in .pt2 (what torch.export.save writes).
bool IsExportedProgramFile(const std::string& path);

// `inputs`: one spec per user input, or none for the exported example's.
// kNotFound for a missing file; kInvalidArgument (naming the file) for no
// .pt2 program, another number of inputs, a non-positive size, or a node
// that fails on these sizes (LibTorch's message, with the node).
absl::StatusOr<ModelTrace> TraceExportedProgram(const std::string& path,
                                                const std::vector<TensorSpec>& inputs);

// TraceExportedProgram, then BuildTrainingGraph.
absl::StatusOr<GraphDef> ImportExportedProgram(const std::string& path,
                                               const std::vector<TensorSpec>& inputs,
                                               const TrainingGraphOptions& options = {});

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORT_IMPORT_H_
