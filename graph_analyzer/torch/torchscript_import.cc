// File: torchscript_import.cc
#include "graph_analyzer/torch/torchscript_import.h"

#include <cstdint>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/torch/trace_values.h"
#include "torch/csrc/jit/passes/inliner.h"
#include "torch/script.h"

namespace rdmaflow::graph {
namespace {

using torch::jit::Node;
using torch::jit::Value;

class Tracer {
 public:
  explicit Tracer(const std::string& path) : path_(path) {}

  absl::StatusOr<ModelTrace> Run(torch::jit::Module& module,
                                 const std::vector<TensorSpec>& inputs) {
    trace_.set_name(std::filesystem::path(path_).stem().string());
    trace_.set_source("torchscript");
    if (!module.find_method("forward").has_value()) {
      return Invalid("has no forward() method");
    }
    std::shared_ptr<torch::jit::Graph> graph =
        module.get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      // A parameter shared by two submodules (tied weights) once, under
      // its first name, as torch.nn.Module.named_parameters() has it.
      if (!parameters_.emplace(p.value.unsafeGetTensorImpl(), p.name).second) continue;
      ASSIGN_OR_RETURN(TensorSpec spec, Spec(p.value, p.name));
      TracedTensor* t = trace_.add_parameter();
      t->set_name(p.name);
      *t->mutable_spec() = spec;
      declared_.insert(p.name);
    }
    for (const auto& b : module.named_buffers(/*recurse=*/true)) {
      buffers_.emplace(b.value.unsafeGetTensorImpl(), b.name);
    }
    const auto graph_inputs = graph->inputs();
    if (graph_inputs.size() != inputs.size() + 1) {
      return Invalid(absl::StrCat("forward() takes ", graph_inputs.size() - 1,
                                  " input(s); sizes were given for ", inputs.size()));
    }
    env_[graph_inputs[0]] = Slot{module._ivalue(), {}, false, {}, false};
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(inputs[i].dtype()));
      const std::vector<int64_t> shape(inputs[i].shape().begin(), inputs[i].shape().end());
      for (int64_t d : shape) {
        if (d <= 0) {
          return Invalid(absl::StrCat("input ", i, " ", SpecString(inputs[i]),
                                      ": every dimension must be positive"));
        }
      }
      const std::string name = Name(graph_inputs[i + 1]);
      TracedTensor* t = trace_.add_input();
      t->set_name(name);
      *t->mutable_spec() = inputs[i];
      declared_.insert(name);
      env_[graph_inputs[i + 1]] =
          Slot{torch::zeros(shape, torch::dtype(type)), {name}, true, {}, true};
      specs_[name] = inputs[i];
    }
    at::NoGradGuard no_grad;
    RETURN_IF_ERROR(RunBlock(graph->block()));
    const Slot& out = env_.at(graph->outputs()[0]);
    if (graph->outputs().size() != 1 || !out.value.isTensor()) {
      return Invalid(absl::StrCat("forward() returns ", out.value.tagKind(),
                                  ": it must return one tensor (the logits or the "
                                  "output the loss is taken of)"));
    }
    if (out.names.size() != 1) {
      return Invalid("forward() returns a constant, not a tensor computed from its inputs");
    }
    trace_.set_output(out.names[0]);
    return std::move(trace_);
  }

 private:
  // A value as the trace knows it: what it holds, the names of the tensors
  // in it (one for a tensor, one per element for a list of tensors), and
  // whether it depends on an input or a parameter.
  struct Slot {
    c10::IValue value;
    std::vector<std::string> names;
    bool live = false;
    // For a list or tuple: the names in each element (an unpack hands
    // them out).
    std::vector<std::vector<std::string>> parts;
    // Whether the value depends on what a tensor that changes from step
    // to step holds (an input, a parameter, a buffer), not only on its
    // shape or type: a branch on such a value cannot be decided here,
    // where the inputs are zeros.
    bool data = false;
  };

  absl::Status Invalid(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("TorchScript '", path_, "': ", what));
  }

  // A value's name in the trace; the k-th pass (k > 0) of an unrolled loop
  // suffixes its values' names with "@k".
  std::string Name(const Value* v) const {
    return absl::StrCat("%", v->debugName(), pass_suffix_);
  }

  absl::StatusOr<TensorSpec> Spec(const at::Tensor& t, const std::string& name) {
    absl::StatusOr<TensorSpec> spec = SpecOf(t);
    if (!spec.ok()) return Invalid(absl::StrCat("tensor '", name, "': ", spec.status().message()));
    return spec;
  }

  // Names the tensors in `v`, held by value `value`.
  absl::StatusOr<std::vector<std::string>> NameTensors(const c10::IValue& v,
                                                       const Value* value) {
    std::vector<std::string> names;
    if (v.isTensor()) {
      names.push_back(Name(value));
      ASSIGN_OR_RETURN(specs_[names.back()], Spec(v.toTensor(), names.back()));
    } else if (v.isTensorList()) {
      const auto list = v.toTensorVector();
      for (size_t j = 0; j < list.size(); ++j) {
        names.push_back(absl::StrCat(Name(value), ".", j));
        ASSIGN_OR_RETURN(specs_[names.back()], Spec(list[j], names.back()));
      }
    }
    return names;
  }

  // Declares a tensor read by a traced op that no traced op produced: a
  // buffer, or a constant computed from constants.
  void DeclareBuffer(const std::string& name) {
    if (!declared_.insert(name).second) return;
    TracedTensor* t = trace_.add_buffer();
    t->set_name(name);
    *t->mutable_spec() = specs_.at(name);
  }

  absl::Status RunBlock(torch::jit::Block* block) {
    for (Node* node : block->nodes()) RETURN_IF_ERROR(Step(node));
    return absl::OkStatus();
  }

  // An if whose condition depends only on attributes, shapes and types
  // (a batch norm's `training`, a check of x.dim()) is decided for these
  // inputs, as torch.export does: the branch taken is traced, the other
  // left out. A branch on a tensor's values, and a loop, are refused.
  absl::Status Branch(Node* node, const std::string& where) {
    const Slot& condition = env_.at(node->input(0));
    if (condition.data) {
      return Invalid(absl::StrCat(
          where, " branches on the values of a tensor (",
          node->input(0)->debugName(), "): data-dependent control flow, which a "
          "graph of one step cannot hold: "
          "trace the module (torch.jit.trace) on a representative input, or make "
          "the branch depend only on attributes and shapes"));
    }
    if (!condition.value.isBool() || node->blocks().size() != 2) {
      return Invalid(absl::StrCat(where, " has a condition that is not a bool"));
    }
    torch::jit::Block* taken = node->blocks()[condition.value.toBool() ? 0 : 1];
    RETURN_IF_ERROR(RunBlock(taken));
    if (taken->outputs().size() != node->outputs().size()) {
      return Invalid(absl::StrCat(where, ": its branch returns another number of values"));
    }
    for (size_t k = 0; k < node->outputs().size(); ++k) {
      Slot out = env_.at(taken->outputs()[k]);  // a copy before env_ grows
      env_[node->outputs()[k]] = std::move(out);
    }
    return absl::OkStatus();
  }

  // A loop whose trip count and condition depend only on attributes and
  // shapes (a check over a tensor's dimensions, a layer applied x.size(0)
  // times) is unrolled, as torch.export does; one on a tensor's values is
  // refused.
  absl::Status Unroll(Node* node, const std::string& where) {
    // prim::Loop(trip count, condition, carried...): the body takes
    // (iteration, carried...) and gives (condition, carried...).
    torch::jit::Block* body = node->blocks()[0];
    const size_t carried = node->outputs().size();
    if (node->inputs().size() != carried + 2 || body->inputs().size() != carried + 1 ||
        body->outputs().size() != carried + 1) {
      return Invalid(absl::StrCat(where, " is a loop of an unknown form"));
    }
    // Copies: env_ (a flat map) moves its values as the body adds to it.
    const Slot trips = env_.at(node->input(0));
    RETURN_IF_ERROR(LoopCondition(env_.at(node->input(1)), node, where));
    if (trips.data || !trips.value.isInt()) {
      return Invalid(absl::StrCat(where, " loops a number of times read from a tensor's "
                                  "values: data-dependent control flow, which a graph of "
                                  "one step cannot hold: trace the module instead"));
    }
    std::vector<Slot> state;
    for (size_t k = 0; k < carried; ++k) state.push_back(env_.at(node->input(k + 2)));
    bool go = env_.at(node->input(1)).value.toBool();
    const std::string outer_suffix = pass_suffix_;
    const int first_index = next_index_;
    for (int64_t i = 0; go && i < trips.value.toInt(); ++i) {
      if (i >= kMaxUnrolledPasses) {
        return Invalid(absl::StrCat(where, " loops more than ", kMaxUnrolledPasses,
                                    " times: trace the module instead"));
      }
      pass_suffix_ = i == 0 ? outer_suffix : absl::StrCat(outer_suffix, "@", i);
      next_index_ = first_index;
      env_[body->inputs()[0]] = Slot{c10::IValue(i), {}, false, {}, false};
      for (size_t k = 0; k < carried; ++k) env_[body->inputs()[k + 1]] = state[k];
      RETURN_IF_ERROR(RunBlock(body));
      const Slot& condition = env_.at(body->outputs()[0]);
      RETURN_IF_ERROR(LoopCondition(condition, node, where));
      go = condition.value.toBool();
      for (size_t k = 0; k < carried; ++k) state[k] = env_.at(body->outputs()[k + 1]);
    }
    pass_suffix_ = outer_suffix;
    for (size_t k = 0; k < carried; ++k) env_[node->outputs()[k]] = std::move(state[k]);
    return absl::OkStatus();
  }

  absl::Status LoopCondition(const Slot& condition, const Node* node,
                             const std::string& where) const {
    if (condition.data) {
      return Invalid(absl::StrCat(where, " loops while a condition on the values of a "
                                  "tensor holds: data-dependent control flow, which a "
                                  "graph of one step cannot hold: trace the module instead"));
    }
    if (!condition.value.isBool()) {
      return Invalid(absl::StrCat(where, " has a loop condition that is not a bool"));
    }
    return absl::OkStatus();
  }

  // Ops that read only a tensor's shape, type or place, or whether a value
  // is None: their results do not depend on what the tensor holds.
  static bool ReadsOnlyMetadata(const std::string& kind) {
    static const absl::flat_hash_set<std::string>* const kOps =
        new absl::flat_hash_set<std::string>{
            "aten::size", "aten::sym_size", "aten::dim", "aten::numel", "aten::len",
            "aten::__is__", "aten::__isnot__", "aten::is_floating_point",
            "aten::is_complex", "aten::is_nested", "prim::dtype", "prim::device",
            "prim::layout", "prim::requires_grad", "prim::isinstance"};
    return kOps->contains(kind) || absl::StartsWith(kind, "prim::is_");
  }

  absl::Status Step(Node* node) {
    const std::string kind = node->kind().toQualString();
    const std::string where = absl::StrCat("node #", next_index_++, " (", kind, ")");
    if (node->kind() == c10::prim::If) return Branch(node, where);
    if (node->kind() == c10::prim::Loop) return Unroll(node, where);
    if (!node->blocks().empty()) {
      return Invalid(absl::StrCat(where, " is control flow the importer cannot decide "
                                  "for one step: trace the module (torch.jit.trace) "
                                  "instead of scripting it"));
    }
    if (kind == "aten::is_grad_enabled") {
      // The graph is of a training step: gradients are on there, whatever
      // this run (which needs none) does.
      env_[node->output()] = Slot{c10::IValue(true), {}, false, {}, false};
      return absl::OkStatus();
    }
    if (node->kind() == c10::prim::Constant) {
      // A function (F.relu in scripted code) is no value: inlining has
      // already put its body where it was called.
      if (node->output()->type()->kind() == c10::TypeKind::FunctionType) {
        return absl::OkStatus();
      }
      std::optional<c10::IValue> v = torch::jit::toIValue(node->output());
      if (!v.has_value()) return Invalid(absl::StrCat(where, " has no value"));
      // torch.jit.trace turns a Python number in an expression (x * 0.5)
      // into a 0-d constant tensor: the trace keeps it a number (an
      // argument), as torch.fx does; only the run sees the tensor.
      if (v->isTensor() && v->toTensor().dim() == 0) {
        env_[node->output()] = Slot{*v, {}, false};
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(std::vector<std::string> names, NameTensors(*v, node->output()));
      env_[node->output()] = Slot{*v, std::move(names), false};
      return absl::OkStatus();
    }
    if (node->kind() == c10::prim::GetAttr) {
      const Slot& owner = env_.at(node->input());
      if (!owner.value.isObject()) {
        return Invalid(absl::StrCat(where, " reads an attribute of a non-object"));
      }
      c10::IValue v = owner.value.toObject()->getAttr(node->s(c10::attr::name));
      Slot slot{v, {}, false, {}, v.isTensor()};
      if (v.isTensor()) {
        const c10::TensorImpl* impl = v.toTensor().unsafeGetTensorImpl();
        if (auto p = parameters_.find(impl); p != parameters_.end()) {
          slot.names = {p->second};
          slot.live = true;
        } else {
          slot.names = {buffers_.count(impl) ? buffers_.at(impl) : Name(node->output())};
        }
        ASSIGN_OR_RETURN(specs_[slot.names[0]], Spec(v.toTensor(), slot.names[0]));
      }
      env_[node->output()] = std::move(slot);
      return absl::OkStatus();
    }

    torch::jit::Stack stack;
    std::vector<std::string> tensor_inputs;
    bool live = false;
    bool data = false;
    for (const Value* in : node->inputs()) {
      const Slot& s = env_.at(in);
      stack.push_back(s.value);
      tensor_inputs.insert(tensor_inputs.end(), s.names.begin(), s.names.end());
      live = live || s.live;
      data = data || s.data;
    }
    data = data && !ReadsOnlyMetadata(kind);
    try {
      RunNode(node, stack);
    } catch (const c10::Error& e) {
      return Invalid(absl::StrCat(where, " failed on the given input sizes (are they "
                                  "what the model expects?): ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return Invalid(absl::StrCat(where, " failed on the given input sizes (are they "
                                  "what the model expects?): ", e.what()));
    }
    const size_t n = node->outputs().size();
    if (stack.size() != n) return Invalid(absl::StrCat(where, ": unexpected results"));

    const bool plumbing = node->kind() == c10::prim::ListConstruct ||
                          node->kind() == c10::prim::TupleConstruct ||
                          node->kind() == c10::prim::ListUnpack ||
                          node->kind() == c10::prim::TupleUnpack;
    if (plumbing) {
      // Lists and tuples keep the names of their elements' tensors.
      const bool unpack = node->kind() == c10::prim::ListUnpack ||
                          node->kind() == c10::prim::TupleUnpack;
      if (!unpack) {
        Slot slot{stack[0], tensor_inputs, live, {}, data};
        for (const Value* in : node->inputs()) slot.parts.push_back(env_.at(in).names);
        env_[node->output()] = std::move(slot);
        return absl::OkStatus();
      }
      const Slot packed = env_.at(node->input());  // a copy: env_ grows below
      for (size_t k = 0; k < n; ++k) {
        Slot slot{stack[k], {}, live, {}, data};
        if (packed.parts.size() == n) {
          slot.names = packed.parts[k];
        } else if (!packed.names.empty()) {
          return Invalid(absl::StrCat(where, " unpacks ", n, " values from a list or "
                                      "tuple whose tensors it cannot tell apart"));
        }
        env_[node->outputs()[k]] = std::move(slot);
      }
      return absl::OkStatus();
    }

    TracedOp op;
    bool has_tensor_output = false;
    for (size_t k = 0; k < n; ++k) {
      ASSIGN_OR_RETURN(std::vector<std::string> names,
                       NameTensors(stack[k], node->outputs()[k]));
      Slot slot{stack[k], names, live, {}, data};
      if (stack[k].isTensorList()) {
        for (const std::string& name : names) slot.parts.push_back({name});
      }
      for (const std::string& name : names) {
        op.add_output(name);
        *op.add_output_spec() = specs_.at(name);
        has_tensor_output = true;
      }
      env_[node->outputs()[k]] = std::move(slot);
    }
    // Only ops on inputs or parameters, with a tensor result, are the
    // model's computation; the rest (sizes, constants, a buffer's counter)
    // only feed it.
    if (!live || !has_tensor_output) return absl::OkStatus();
    // A tensor computed from the inputs must be named, or its edge (and
    // the gradients behind it) would be lost without a word.
    for (const Value* in : node->inputs()) {
      const Slot& s = env_.at(in);
      if (s.live && s.names.empty() && (s.value.isTensor() || s.value.isTensorList())) {
        return Invalid(absl::StrCat(where, " reads a tensor the importer lost track of (",
                                    in->debugName(), "); trace the module instead"));
      }
    }
    op.set_kind(kind);
    for (const std::string& name : tensor_inputs) {
      if (!declared_.contains(name)) DeclareBuffer(name);
      op.add_input(name);
    }
    const c10::FunctionSchema* schema = node->maybeSchema();
    const auto node_inputs = node->inputs();
    for (size_t i = 0; schema != nullptr && i < node_inputs.size() &&
                       i < schema->arguments().size(); ++i) {
      const Slot& s = env_.at(node_inputs[i]);
      if (!s.names.empty()) continue;
      AttrValue attr;
      if (ToAttr(s.value, &attr)) (*op.mutable_arg())[schema->arguments()[i].name()] = attr;
    }
    if (op.input_size() >= 2) {
      CanonicalizeConvolution(specs_.at(op.input(1)).shape_size(), op);
    }
    for (const std::string& name : op.output()) declared_.insert(name);
    *trace_.add_op() = std::move(op);
    return absl::OkStatus();
  }

  // Runs `node` on `stack` (its inputs; its outputs after). Lists and
  // tuples are built and taken apart here: the interpreter does that
  // itself, with no operator to call.
  static void RunNode(const Node* node, torch::jit::Stack& stack) {
    if (node->kind() == c10::prim::ListConstruct) {
      c10::impl::GenericList list(
          node->output()->type()->expectRef<c10::ListType>().getElementType());
      for (c10::IValue& v : stack) list.push_back(std::move(v));
      stack.clear();
      stack.emplace_back(std::move(list));
    } else if (node->kind() == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> elements(stack.begin(), stack.end());
      stack.clear();
      stack.emplace_back(c10::ivalue::Tuple::create(std::move(elements)));
    } else if (node->kind() == c10::prim::ListUnpack ||
               node->kind() == c10::prim::TupleUnpack) {
      c10::IValue packed = std::move(stack.at(0));
      stack.clear();
      if (packed.isTuple()) {
        for (const c10::IValue& v : packed.toTupleRef().elements()) stack.push_back(v);
      } else {
        for (const c10::IValue& v : packed.toListRef()) stack.push_back(v);
      }
    } else {
      node->getOperation()(stack);
    }
  }

  // More passes than any loop over a tensor's dimensions or a model's
  // layers makes: a bound, so that a loop over a large size fails rather
  // than building a graph without end.
  static constexpr int64_t kMaxUnrolledPasses = 4096;

  std::string path_;
  int next_index_ = 0;
  std::string pass_suffix_;
  ModelTrace trace_;
  absl::flat_hash_map<const Value*, Slot> env_;
  absl::flat_hash_map<const c10::TensorImpl*, std::string> parameters_;
  absl::flat_hash_map<const c10::TensorImpl*, std::string> buffers_;
  absl::flat_hash_map<std::string, TensorSpec> specs_;
  absl::flat_hash_set<std::string> declared_;
};

}  // namespace

absl::StatusOr<torch::jit::Module> LoadTorchScript(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(
        "TorchScript '", path, "': no such file (save one with torch.jit.save)"));
  }
  std::string message;
  try {
    return torch::jit::load(path);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "TorchScript '", path, "' cannot be read (is it a module saved with "
      "torch.jit.save?): ", message));
}

absl::StatusOr<ModelTrace> TraceTorchScript(const std::string& path,
                                            const std::vector<TensorSpec>& inputs) {
  ASSIGN_OR_RETURN(torch::jit::Module module, LoadTorchScript(path));
  std::string message;
  try {
    return Tracer(path).Run(module, inputs);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TorchScript '", path, "' could not be traced: ", message));
}

absl::StatusOr<GraphDef> ImportTorchScript(const std::string& path,
                                           const std::vector<TensorSpec>& inputs,
                                           const TrainingGraphOptions& options) {
  ASSIGN_OR_RETURN(ModelTrace trace, TraceTorchScript(path, inputs));
  return BuildTrainingGraph(trace, options);
}

}  // namespace rdmaflow::graph
