// File: exported_program.h
// -----------------------------------------------------------------------------
// A program saved by torch.export (torch.export.save: a .pt2 archive) as
// LibTorch can run it, without Python: its graph of aten ops, what each of
// its placeholders is (a parameter, a buffer, a constant, a user input), its
// weights, and an interpreter that runs the graph op by op through LibTorch's
// dispatcher, on CPU. The torch.export importer (export_import.h) runs it on
// zero tensors to trace shapes; the trainer (train/models.h) runs it with
// the file's weights and autograd to train.
//
// Read: the archive's models/model.json (export schema major version 8, the
// one torch 2.11 writes; unknown fields are ignored), and the payloads under
// data/weights/ and data/constants/. Ops are looked up by their aten name
// and overload; arguments the file leaves at their default take the op's
// schema default. Symbolic sizes (a dynamic batch) are whatever the run's
// tensors have: the graph's sym_size nodes read them.
//
//   ASSIGN_OR_RETURN(ExportedProgram program, ExportedProgram::Load("m.pt2"));
//   std::vector<at::Tensor> values = ...;  // one per placeholder
//   ASSIGN_OR_RETURN(std::vector<c10::IValue> outputs, program.Run(values));
#ifndef RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORTED_PROGRAM_H_
#define RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORTED_PROGRAM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/dispatch/Dispatcher.h"
#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"

namespace rdmaflow::graph {

// One argument of a node, as the file writes it.
struct ExportedArgument {
  enum class Kind {
    kNone,
    kTensor,           // names[0]
    kTensors,          // names
    kOptionalTensors,  // names, "" for None
    kInt,              // ints[0]
    kInts,             // ints
    kSymInt,           // names[0] (a symbol) or ints[0]
    kSymInts,          // per element names[i] (a symbol) or ints[i] ("" name)
    kFloat,            // floats[0]
    kFloats,           // floats
    kBool,             // ints[0] (0 or 1)
    kBools,            // ints
    kString,           // text
    kScalarType,       // scalar_type
    kMemoryFormat,     // memory_format
    kLayout,           // layout
    kDevice,           // always the CPU here
  };
  Kind kind = Kind::kNone;
  std::vector<std::string> names;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::string text;
  c10::ScalarType scalar_type = c10::ScalarType::Undefined;
  c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous;
  c10::Layout layout = c10::Layout::Strided;
};

// A node: an aten op (`op` set) or an arithmetic op on symbolic sizes
// (target "_operator.add", ...).
struct ExportedNode {
  std::string name;    // the fx name ("linear_1")
  std::string target;  // "torch.ops.aten.linear.default"
  std::string kind;    // "aten::linear", or the target of a size op
  std::optional<c10::OperatorHandle> op;
  // The arguments the file writes, by the schema's argument names.
  std::vector<std::pair<std::string, ExportedArgument>> inputs;
  std::vector<ExportedArgument> outputs;
};

struct ExportedPlaceholder {
  enum class Kind { kParameter, kBuffer, kConstant, kUserInput };
  Kind kind = Kind::kUserInput;
  std::string name;  // in the graph ("p_fc_weight", "x")
  std::string fqn;   // the module's name for it ("fc.weight"); name for inputs
  c10::ScalarType dtype = c10::ScalarType::Float;
  // The example's sizes (a symbolic size's hint).
  std::vector<int64_t> sizes;
};

class ExportedProgram {
 public:
  // Reads the program in `path` (weights are read by Weights()).
  // kNotFound for no such file; kInvalidArgument naming the file and what
  // is wrong: no .pt2 archive, another export schema, an op LibTorch does
  // not have, an argument or output kind this reader does not take.
  static absl::StatusOr<ExportedProgram> Load(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& torch_version() const { return torch_version_; }
  const std::vector<ExportedPlaceholder>& placeholders() const { return placeholders_; }
  const std::vector<ExportedNode>& nodes() const { return nodes_; }
  // The graph's outputs and which of them is the model's output (the one
  // user output) and which update a buffer (core ATen programs).
  const std::vector<ExportedArgument>& outputs() const { return outputs_; }
  size_t user_output() const { return user_output_; }
  const std::vector<std::pair<size_t, std::string>>& buffer_updates() const {
    return buffer_updates_;
  }

  // The saved parameters, buffers and constants by their module name
  // ("fc.weight"), each a tensor of its own storage. kInvalidArgument
  // for a payload that is missing, pickled, or smaller than its sizes.
  absl::StatusOr<std::map<std::string, at::Tensor>> Weights() const;

  // Called after each node with the arguments it ran on (in the schema's
  // order, defaults filled in) and what it returned; a non-ok status stops
  // the run with it.
  using Observer = std::function<absl::Status(const ExportedNode& node,
                                              const std::vector<c10::IValue>& arguments,
                                              const std::vector<c10::IValue>& results)>;

  // Runs the graph on one value per placeholder (in placeholders() order)
  // and returns its outputs. kInvalidArgument naming the node and giving
  // LibTorch's message when an op fails (sizes the model does not take).
  absl::StatusOr<std::vector<c10::IValue>> Run(const std::vector<at::Tensor>& values,
                                              const Observer& observer = nullptr) const;

 private:
  std::string path_;
  std::string torch_version_;
  std::vector<ExportedPlaceholder> placeholders_;
  std::vector<ExportedNode> nodes_;
  std::vector<ExportedArgument> outputs_;
  size_t user_output_ = 0;
  std::vector<std::pair<size_t, std::string>> buffer_updates_;
};

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TORCH_EXPORTED_PROGRAM_H_
