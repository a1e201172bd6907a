// File: training_graph.cc
#include "graph_analyzer/training_graph.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "graph_analyzer/internal/traced_op_mapping.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {
namespace {

using internal::MappedInput;

// A tensor of the trace as the graph being built holds it.
struct Value {
  std::string ref;  // "node:k"
  TensorSpec spec;
  bool needs_grad = false;  // a parameter's gradient flows back through it
};

// A traced op's place in the forward graph, for the backward pass.
struct Unit {
  std::string name;
  std::vector<std::string> inputs;   // trace names
  std::vector<std::string> outputs;  // trace names
  bool needs_grad = false;
};

class Builder {
 public:
  Builder(const ModelTrace& trace, const TrainingGraphOptions& options)
      : trace_(trace), options_(options) {}

  absl::StatusOr<GraphDef> Build() && {
    if (trace_.input_size() == 0) return Invalid("has no inputs");
    if (trace_.parameter_size() == 0) {
      return Invalid("has no trainable parameters: nothing to train or exchange");
    }
    graph_.set_name(trace_.name());
    for (int i = 0; i < trace_.input_size(); ++i) {
      const std::string name =
          trace_.input_size() == 1 ? "input" : absl::StrCat("input", i);
      RETURN_IF_ERROR(AddSource(trace_.input(i), name, "Placeholder", false));
    }
    for (const TracedTensor& p : trace_.parameter()) {
      RETURN_IF_ERROR(AddSource(p, Plain(p.name()), "Variable", true));
    }
    for (const TracedTensor& b : trace_.buffer()) {
      RETURN_IF_ERROR(AddSource(b, Plain(b.name()), "Const", false));
    }
    for (int i = 0; i < trace_.op_size(); ++i) RETURN_IF_ERROR(AddOp(i));
    RETURN_IF_ERROR(AddLossAndBackward());
    return std::move(graph_);
  }

 private:
  absl::Status Invalid(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "model trace '", trace_.name(), "' (", trace_.source(), "): ", what));
  }

  // `wanted`, or `wanted` followed by enough "_" to be unused; never ':'.
  std::string Unique(const std::string& wanted) {
    std::string name = absl::StrReplaceAll(wanted, {{":", "_"}});
    if (name.empty()) name = "_";
    while (!used_.insert(name).second) name += "_";
    return name;
  }

  // A name from the trace as the start of node names: no '/', which
  // separates a node's forward node from what it is (placement.h).
  static std::string Plain(const std::string& name) {
    return absl::StrReplaceAll(name, {{"/", "_"}});
  }

  NodeDef& AddNode(const std::string& name, const std::string& op) {
    NodeDef& node = *graph_.add_node();
    node.set_name(name);
    node.set_op(op);
    node.set_rank(options_.rank);
    return node;
  }

  // Traced specs are concrete: a known dtype, and dimensions the analyzer takes
  // (1 .. 2^40; -1 is no traced size). Checked before any shape function
  // sees them.
  absl::Status CheckTraced(const std::string& trace_name, const TensorSpec& spec) {
    absl::Status valid = CheckSpec(spec);
    for (int d = 0; valid.ok() && d < spec.shape_size(); ++d) {
      if (spec.shape(d) < 1) {
        valid = absl::InvalidArgumentError(absl::StrCat(
            "dimension ", d, " is ", spec.shape(d), "; a traced size is positive"));
      }
    }
    if (!valid.ok()) {
      return Invalid(absl::StrCat("tensor '", trace_name, "': ", valid.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Define(const std::string& trace_name, Value value) {
    RETURN_IF_ERROR(CheckTraced(trace_name, value.spec));
    if (!values_.emplace(trace_name, std::move(value)).second) {
      return Invalid(absl::StrCat("tensor '", trace_name, "' is defined twice"));
    }
    return absl::OkStatus();
  }

  absl::Status AddSource(const TracedTensor& t, const std::string& wanted,
                         const std::string& op, bool trainable) {
    const std::string name = Unique(wanted);
    NodeDef& node = AddNode(name, op);
    *node.add_output() = t.spec();
    return Define(t.name(), Value{absl::StrCat(name, ":0"), t.spec(), trainable});
  }

  absl::Status AddOp(int i) {
    const TracedOp& op = trace_.op(i);
    const std::string where = absl::StrCat("op #", i, " (", op.kind(), ")");
    if (op.output_size() == 0 || op.output_size() != op.output_spec_size()) {
      return Invalid(absl::StrCat(where, " has ", op.output_size(), " output(s) and ",
                                  op.output_spec_size(), " output spec(s); it needs "
                                  "at least one tensor output, each with its spec"));
    }
    if (internal::ShortKind(op.kind()).empty()) {
      return Invalid(absl::StrCat(where, " has no kind (the op's name, e.g. aten::relu)"));
    }
    Unit unit;
    unit.name = Unique(absl::StrCat(Plain(internal::ShortKind(op.kind())), "_", i));
    std::vector<MappedInput> inputs;
    for (const std::string& in : op.input()) {
      auto it = values_.find(in);
      if (it == values_.end()) {
        return Invalid(absl::StrCat(where, " reads '", in, "', which is no input, "
                                    "parameter or buffer, nor the output of an "
                                    "earlier op"));
      }
      inputs.push_back(MappedInput{it->second.ref, it->second.spec});
      unit.inputs.push_back(in);
      unit.needs_grad = unit.needs_grad || it->second.needs_grad;
    }
    for (int k = 0; k < op.output_size(); ++k) {
      RETURN_IF_ERROR(CheckTraced(op.output(k), op.output_spec(k)));
    }
    internal::MappedOp mapped = internal::MapTracedOp(op, inputs, unit.name);
    for (NodeDef& node : mapped.nodes) {
      if (node.name() != unit.name && !used_.insert(node.name()).second) {
        return Invalid(absl::StrCat(where, ": node name '", node.name(), "' is taken"));
      }
      node.set_rank(options_.rank);
      *graph_.add_node() = std::move(node);
    }
    const std::string& last = graph_.node(graph_.node_size() - 1).name();
    for (int k = 0; k < op.output_size(); ++k) {
      RETURN_IF_ERROR(Define(op.output(k), Value{absl::StrCat(last, ":", k),
                                                 op.output_spec(k), unit.needs_grad}));
      unit.outputs.push_back(op.output(k));
    }
    units_.push_back(std::move(unit));
    return absl::OkStatus();
  }

  // The one tensor holding the gradient of `value`: its only contribution,
  // or their sum.
  std::string GradientOf(const std::string& value) {
    std::vector<std::string>& refs = grads_[value];
    if (refs.size() == 1) return refs[0];
    // "node:0" -> "node/grad_sum", "node:2" -> "node/grad_sum_2".
    const std::string& ref = values_.at(value).ref;
    const size_t colon = ref.rfind(':');
    const std::string k = ref.substr(colon + 1);
    NodeDef& sum = AddNode(Unique(absl::StrCat(ref.substr(0, colon), "/grad_sum",
                                               k == "0" ? "" : "_" + k)),
                           "AddN");
    for (const std::string& r : refs) sum.add_input(r);
    refs = {absl::StrCat(sum.name(), ":0")};
    return refs[0];
  }

  absl::Status AddLossAndBackward() {
    auto out = values_.find(trace_.output());
    if (out == values_.end()) {
      return Invalid(absl::StrCat("its output '", trace_.output(),
                                  "' is not a tensor of the trace"));
    }
    if (!out->second.needs_grad) {
      return Invalid(absl::StrCat("no parameter reaches its output '", trace_.output(),
                                  "': nothing would be trained"));
    }
    const Value& output = out->second;
    NodeDef* loss = nullptr;
    if (output.spec.shape_size() == 2 && output.spec.shape(0) > 0) {
      const std::string labels = Unique("labels");
      NodeDef& l = AddNode(labels, "Placeholder");
      *l.add_output() = MakeSpec(DT_INT64, {output.spec.shape(0)});
      loss = &AddNode(Unique("loss"), "SoftmaxCrossEntropy");
      loss->add_input(output.ref);
      loss->add_input(absl::StrCat(labels, ":0"));
    } else {
      loss = &AddNode(Unique("loss"), "ReduceMean");
      loss->add_input(output.ref);
    }
    const std::string loss_ref = absl::StrCat(loss->name(), ":0");
    NodeDef& seed = AddNode(Unique(absl::StrCat(loss->name(), "/grad")), "Gradient");
    seed.add_input(output.ref);
    seed.add_input(loss_ref);
    (*seed.mutable_attr())["wrt"].set_i(1);
    grads_[trace_.output()].push_back(absl::StrCat(seed.name(), ":0"));

    for (auto unit = units_.rbegin(); unit != units_.rend(); ++unit) {
      if (!unit->needs_grad) continue;
      std::vector<std::string> upstream;
      for (const std::string& o : unit->outputs) {
        if (grads_.contains(o)) upstream.push_back(GradientOf(o));
      }
      if (upstream.empty()) continue;  // its outputs do not reach the loss
      std::vector<int> wrt;
      for (size_t k = 0; k < unit->inputs.size(); ++k) {
        if (values_.at(unit->inputs[k]).needs_grad) wrt.push_back(static_cast<int>(k));
      }
      NodeDef& grad = AddNode(Unique(absl::StrCat(unit->name, "/grad")), "Gradient");
      for (int k : wrt) grad.add_input(values_.at(unit->inputs[k]).ref);
      for (const std::string& u : upstream) grad.add_input(u);
      (*grad.mutable_attr())["wrt"].set_i(static_cast<int64_t>(wrt.size()));
      for (size_t j = 0; j < wrt.size(); ++j) {
        grads_[unit->inputs[wrt[j]]].push_back(absl::StrCat(grad.name(), ":", j));
      }
    }

    for (const TracedTensor& p : trace_.parameter()) {
      auto g = grads_.find(p.name());
      if (g == grads_.end()) continue;  // unused by this forward pass
      const std::string param = values_.at(p.name()).ref;
      const std::string param_node = param.substr(0, param.rfind(':'));
      NodeDef& total = AddNode(Unique(absl::StrCat(param_node, "/grad")),
                               g->second.size() == 1 ? "Identity" : "AddN");
      for (const std::string& r : g->second) total.add_input(r);
      NodeDef& apply = AddNode(Unique(absl::StrCat(param_node, "/apply")), "ApplyGradient");
      apply.add_input(param);
      apply.add_input(absl::StrCat(total.name(), ":0"));
    }
    return absl::OkStatus();
  }

  const ModelTrace& trace_;
  const TrainingGraphOptions& options_;
  GraphDef graph_;
  absl::flat_hash_set<std::string> used_;
  absl::flat_hash_map<std::string, Value> values_;
  absl::flat_hash_map<std::string, std::vector<std::string>> grads_;
  std::vector<Unit> units_;
};

}  // namespace

absl::StatusOr<GraphDef> BuildTrainingGraph(const ModelTrace& trace,
                                            const TrainingGraphOptions& options) {
  if (options.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training graph: rank must be >= 0, got ", options.rank));
  }
  return Builder(trace, options).Build();
}

absl::StatusOr<ModelTrace> ModelTraceFromJson(const std::string& json) {
  ModelTrace trace;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &trace, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model trace JSON: ", std::string(status.message())));
  }
  return trace;
}

std::string ParameterGradient(const std::string& parameter) {
  return absl::StrCat(parameter, "/grad:0");
}

}  // namespace rdmaflow::graph
