// File: model_source.h
// -----------------------------------------------------------------------------
// What `rdmaflow plan` reads: a GraphDef in text format, or a PyTorch model
// saved as TorchScript (told apart by the file's zip header) with the sizes
// of its inputs, imported into its training step
// (graph_analyzer/torch/torchscript_import.h).
#ifndef RDMAFLOW_CLI_MODEL_SOURCE_H_
#define RDMAFLOW_CLI_MODEL_SOURCE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::cli {

// "64x1x28x28" (float32) or "8x16:int64"; several separated by ','.
// kInvalidArgument naming the bad part.
absl::StatusOr<std::vector<graph::TensorSpec>> ParseInputSpecs(absl::string_view text);

// True when `path` starts like a zip archive, as torch.jit.save writes.
bool IsTorchScriptFile(const std::string& path);

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_MODEL_SOURCE_H_
