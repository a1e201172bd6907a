// File: export_import.cc
#include "graph_analyzer/torch/export_import.h"

#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include "ATen/ATen.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/torch/exported_program.h"
#include "graph_analyzer/torch/trace_values.h"

namespace rdmaflow::graph {
namespace {

using Kind = ExportedArgument::Kind;
using PlaceholderKind = ExportedPlaceholder::Kind;

bool IsTensorArgument(const ExportedArgument& a) {
  return a.kind == Kind::kTensor || a.kind == Kind::kTensors ||
         a.kind == Kind::kOptionalTensors;
}

class Tracer {
 public:
  explicit Tracer(const ExportedProgram& program) : program_(program) {}

  absl::StatusOr<ModelTrace> Run(const std::vector<TensorSpec>& inputs) {
    trace_.set_name(std::filesystem::path(program_.path()).stem().string());
    trace_.set_source("torch.export");
    size_t user_inputs = 0;
    for (const ExportedPlaceholder& ph : program_.placeholders()) {
      user_inputs += ph.kind == PlaceholderKind::kUserInput;
    }
    if (!inputs.empty() && inputs.size() != user_inputs) {
      return Invalid(absl::StrCat("forward() takes ", user_inputs,
                                  " input(s); sizes were given for ", inputs.size()));
    }
    std::vector<at::Tensor> values;
    size_t next_input = 0;
    for (const ExportedPlaceholder& ph : program_.placeholders()) {
      ASSIGN_OR_RETURN(DataType dtype, Checked(ToDataType(ph.dtype), ph.fqn));
      TensorSpec spec = MakeSpec(dtype, ph.sizes);
      if (ph.kind == PlaceholderKind::kUserInput && !inputs.empty()) {
        spec = inputs[next_input];
      }
      for (int64_t d : spec.shape()) {
        if (d <= 0 && ph.kind == PlaceholderKind::kUserInput) {
          return Invalid(absl::StrCat("input ", next_input, " ", SpecString(spec),
                                      ": every dimension must be positive"));
        }
      }
      ASSIGN_OR_RETURN(c10::ScalarType type, Checked(ToScalarType(spec.dtype()), ph.fqn));
      values.push_back(at::zeros(std::vector<int64_t>(spec.shape().begin(), spec.shape().end()),
                                 at::dtype(type)));
      names_[ph.name] = ph.fqn;
      specs_[ph.fqn] = spec;
      if (ph.kind == PlaceholderKind::kUserInput) {
        ++next_input;
        TracedTensor* t = trace_.add_input();
        t->set_name(ph.fqn);
        *t->mutable_spec() = spec;
        declared_.insert(ph.fqn);
        live_.insert(ph.fqn);
      } else if (ph.kind == PlaceholderKind::kParameter) {
        TracedTensor* t = trace_.add_parameter();
        t->set_name(ph.fqn);
        *t->mutable_spec() = spec;
        declared_.insert(ph.fqn);
        live_.insert(ph.fqn);
      }
    }
    at::NoGradGuard no_grad;
    RETURN_IF_ERROR(program_
                        .Run(values, [this](const ExportedNode& node,
                                            const std::vector<c10::IValue>& arguments,
                                            const std::vector<c10::IValue>& results) {
                          return Record(node, arguments, results);
                        })
                        .status());
    const std::string out =
        Renamed(program_.outputs()[program_.user_output()].names[0]);
    if (!live_.contains(out)) {
      return Invalid("forward() returns a constant, not a tensor computed from its inputs");
    }
    trace_.set_output(out);
    return std::move(trace_);
  }

 private:
  absl::Status Invalid(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("torch.export program '", program_.path(), "': ", what));
  }

  template <typename T>
  absl::StatusOr<T> Checked(absl::StatusOr<T> v, const std::string& name) const {
    if (!v.ok()) return Invalid(absl::StrCat("tensor '", name, "': ", v.status().message()));
    return v;
  }

  std::string Renamed(const std::string& name) const {
    auto it = names_.find(name);
    return it == names_.end() ? name : it->second;
  }

  absl::Status Record(const ExportedNode& node, const std::vector<c10::IValue>& arguments,
                      const std::vector<c10::IValue>& results) {
    std::vector<std::string> tensor_inputs;
    bool live = false;
    for (const auto& [name, a] : node.inputs) {
      if (!IsTensorArgument(a)) continue;
      for (const std::string& t : a.names) {
        if (t.empty()) continue;
        tensor_inputs.push_back(Renamed(t));
        live = live || live_.contains(tensor_inputs.back());
      }
    }
    TracedOp op;
    for (size_t k = 0; k < results.size() && k < node.outputs.size(); ++k) {
      const ExportedArgument& out = node.outputs[k];
      if (out.kind == Kind::kTensor) {
        if (!results[k].isTensor()) {
          return Invalid(absl::StrCat("node '", node.name, "' (", node.target, ") returned ",
                                      results[k].tagKind(), " where the file lists a tensor"));
        }
        RETURN_IF_ERROR(AddOutput(out.names[0], results[k].toTensor(), live, op));
      } else if (out.kind == Kind::kTensors && results[k].isTensorList()) {
        const c10::List<at::Tensor> list = results[k].toTensorList();
        for (size_t j = 0; j < out.names.size() && j < list.size(); ++j) {
          RETURN_IF_ERROR(AddOutput(out.names[j], list.get(j), live, op));
        }
      }
    }
    // Only ops on inputs or parameters, with a tensor result, are the
    // model's computation; the rest (sizes, a buffer's counter) only feed it.
    if (!live || op.output_size() == 0) return absl::OkStatus();
    op.set_kind(node.kind);
    for (const std::string& name : tensor_inputs) {
      if (!declared_.contains(name)) DeclareBuffer(name);
      op.add_input(name);
    }
    const auto& schema_args = node.op->schema().arguments();
    for (size_t j = 0; j < schema_args.size() && j < arguments.size(); ++j) {
      bool tensor = false;
      for (const auto& [name, a] : node.inputs) {
        if (name == schema_args[j].name()) tensor = IsTensorArgument(a);
      }
      if (tensor) continue;
      AttrValue attr;
      if (ToAttr(arguments[j], &attr)) (*op.mutable_arg())[schema_args[j].name()] = attr;
    }
    if (op.input_size() >= 2) {
      CanonicalizeConvolution(specs_.at(op.input(1)).shape_size(), op);
    }
    *trace_.add_op() = std::move(op);
    return absl::OkStatus();
  }

  absl::Status AddOutput(const std::string& name, const at::Tensor& t, bool live, TracedOp& op) {
    ASSIGN_OR_RETURN(TensorSpec spec, Checked(SpecOf(t), name));
    specs_[name] = spec;
    if (!live) return absl::OkStatus();
    live_.insert(name);
    declared_.insert(name);
    op.add_output(name);
    *op.add_output_spec() = spec;
    return absl::OkStatus();
  }

  // A tensor read by a recorded op that no recorded op produced: a
  // buffer, a constant, or a tensor computed from them.
  void DeclareBuffer(const std::string& name) {
    declared_.insert(name);
    TracedTensor* t = trace_.add_buffer();
    t->set_name(name);
    *t->mutable_spec() = specs_.at(name);
  }

  const ExportedProgram& program_;
  ModelTrace trace_;
  absl::flat_hash_map<std::string, std::string> names_;  // placeholder -> module name
  absl::flat_hash_map<std::string, TensorSpec> specs_;
  absl::flat_hash_set<std::string> live_;
  absl::flat_hash_set<std::string> declared_;
};

}  // namespace

bool IsExportedProgramFile(const std::string& path) { return absl::EndsWith(path, ".pt2"); }

absl::StatusOr<ModelTrace> TraceExportedProgram(const std::string& path,
                                                const std::vector<TensorSpec>& inputs) {
  ASSIGN_OR_RETURN(ExportedProgram program, ExportedProgram::Load(path));
  std::string message;
  try {
    return Tracer(program).Run(inputs);
  } catch (const c10::Error& e) {  // at::zeros of sizes LibTorch cannot allocate
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("torch.export program '", path, "' could not be traced: ", message));
}

absl::StatusOr<GraphDef> ImportExportedProgram(const std::string& path,
                                               const std::vector<TensorSpec>& inputs,
                                               const TrainingGraphOptions& options) {
  ASSIGN_OR_RETURN(ModelTrace trace, TraceExportedProgram(path, inputs));
  return BuildTrainingGraph(trace, options);
}

}  // namespace rdmaflow::graph
