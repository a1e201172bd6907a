// File: internal/traced_op_mapping.cc
#include "graph_analyzer/internal/traced_op_mapping.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph_analyzer/op_registry.h"

namespace rdmaflow::graph::internal {
namespace {

bool SameSpec(const TensorSpec& a, const TensorSpec& b) {
  if (a.dtype() != b.dtype() || a.shape_size() != b.shape_size()) return false;
  for (int d = 0; d < a.shape_size(); ++d) {
    if (a.shape(d) != b.shape(d)) return false;
  }
  return true;
}

// What the analyzer infers for `node` on inputs of `specs`.
absl::StatusOr<std::vector<TensorSpec>> Infer(const NodeDef& node,
                                              const std::vector<TensorSpec>& specs) {
  const OpDef* def = FindOp(node.op());
  if (def == nullptr) return absl::NotFoundError(node.op());
  const int n = static_cast<int>(specs.size());
  if (n < def->min_inputs || (def->max_inputs != kVariadic && n > def->max_inputs)) {
    return absl::InvalidArgumentError("input count");
  }
  std::vector<const TensorSpec*> inputs;
  for (const TensorSpec& s : specs) inputs.push_back(&s);
  return def->shape_fn(ShapeContext(node, std::move(inputs)));
}

// Builds a chain of known nodes and keeps it only if every node's inferred
// outputs are what was traced (the last node) or at least inferable (the
// nodes before it).
class Chain {
 public:
  Chain(const TracedOp& op, const std::vector<MappedInput>& inputs, std::string name)
      : op_(op), inputs_(inputs), name_(std::move(name)) {}

  // A node named name_ + suffix running `analyzer_op` on `refs` (indices
  // into the op's inputs, or kPrevious for the chain's last node).
  NodeDef& Add(const std::string& suffix, const std::string& analyzer_op,
               const std::vector<int>& refs) {
    NodeDef& node = nodes_.emplace_back();
    node.set_name(name_ + suffix);
    node.set_op(analyzer_op);
    std::vector<TensorSpec> specs;
    for (int r : refs) {
      if (r == kPrevious) {
        node.add_input(nodes_[nodes_.size() - 2].name() + ":0");
        specs.push_back(previous_);
      } else {
        node.add_input(inputs_[r].ref);
        specs.push_back(inputs_[r].spec);
      }
    }
    specs_.push_back(std::move(specs));
    return node;
  }

  // The nodes, with declared outputs, when the analyzer reproduces the
  // traced outputs; nullopt otherwise.
  std::optional<MappedOp> Verify() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      std::vector<TensorSpec> specs = specs_[i];
      if (i > 0) {
        for (int k = 0; k < nodes_[i].input_size(); ++k) {
          if (nodes_[i].input(k) == nodes_[i - 1].name() + ":0") specs[k] = previous_;
        }
      }
      absl::StatusOr<std::vector<TensorSpec>> out = Infer(nodes_[i], specs);
      if (!out.ok() || out->empty()) return std::nullopt;
      const bool last = i + 1 == nodes_.size();
      if (last) {
        if (static_cast<int>(out->size()) != op_.output_spec_size()) return std::nullopt;
        for (size_t k = 0; k < out->size(); ++k) {
          if (!SameSpec((*out)[k], op_.output_spec(k))) return std::nullopt;
          *nodes_[i].add_output() = (*out)[k];
        }
      } else {
        if (out->size() != 1) return std::nullopt;
        *nodes_[i].add_output() = (*out)[0];
        previous_ = (*out)[0];
      }
    }
    return MappedOp{nodes_};
  }

  static constexpr int kPrevious = -1;

 private:
  const TracedOp& op_;
  const std::vector<MappedInput>& inputs_;
  std::string name_;
  std::vector<NodeDef> nodes_;
  std::vector<std::vector<TensorSpec>> specs_;
  TensorSpec previous_;
};

const AttrValue* Arg(const TracedOp& op, const std::string& name) {
  auto it = op.arg().find(name);
  return it == op.arg().end() ? nullptr : &it->second;
}

std::optional<int64_t> IntArg(const TracedOp& op, const std::string& name) {
  const AttrValue* v = Arg(op, name);
  if (v == nullptr || !v->has_i()) return std::nullopt;
  return v->i();
}

// An int-list argument of `n` entries: a list of n, or one int (or a list
// of one) repeated, as PyTorch broadcasts them. Absent or empty: `fallback`.
std::optional<std::vector<int64_t>> IntsArg(const TracedOp& op, const std::string& name,
                                            int n, std::vector<int64_t> fallback) {
  const AttrValue* v = Arg(op, name);
  if (v == nullptr || (!v->has_i() && v->ints_size() == 0)) return fallback;
  if (v->has_i()) return std::vector<int64_t>(n, v->i());
  if (v->ints_size() == 1) return std::vector<int64_t>(n, v->ints(0));
  if (v->ints_size() != n) return std::nullopt;
  return std::vector<int64_t>(v->ints().begin(), v->ints().end());
}

bool AllOnes(const std::optional<std::vector<int64_t>>& v) {
  if (!v.has_value()) return false;
  for (int64_t x : *v) {
    if (x != 1) return false;
  }
  return true;
}

bool FalseOrAbsent(const TracedOp& op, const std::string& name) {
  const AttrValue* v = Arg(op, name);
  return v == nullptr || (v->has_b() && !v->b()) || (v->has_i() && v->i() == 0);
}

void SetInts(NodeDef& node, const std::string& name, const std::vector<int64_t>& v) {
  AttrValue& a = (*node.mutable_attr())[name];
  for (int64_t x : v) a.add_ints(x);
}

// The known mapping of `op`, verified; nullopt when there is none.
std::optional<MappedOp> MapKnown(const TracedOp& op, const std::vector<MappedInput>& in,
                                 const std::string& name) {
  const std::string kind = ShortKind(op.kind());
  const int n = static_cast<int>(in.size());
  Chain chain(op, in, name);
  if (kind == "linear" && (n == 2 || n == 3)) {
    (*chain.Add("", "MatMul", {0, 1}).mutable_attr())["transpose_b"].set_b(true);
    if (n == 3) chain.Add("/bias", "Add", {Chain::kPrevious, 2});
    return chain.Verify();
  }
  if (kind == "conv2d" && (n == 2 || n == 3)) {
    auto strides = IntsArg(op, "stride", 2, {1, 1});
    auto pads = IntsArg(op, "padding", 2, {0, 0});
    auto dilation = IntsArg(op, "dilation", 2, {1, 1});
    auto groups = IntArg(op, "groups");
    if (!strides || !pads || !AllOnes(dilation) || (groups && *groups != 1)) {
      return std::nullopt;
    }
    NodeDef& conv = chain.Add("", "Conv2D", {0, 1});
    SetInts(conv, "strides", *strides);
    SetInts(conv, "pads", *pads);
    if (n == 3) chain.Add("/bias", "BiasAdd", {Chain::kPrevious, 2});
    return chain.Verify();
  }
  if ((kind == "max_pool2d" || kind == "avg_pool2d") && n == 1) {
    auto ksize = IntsArg(op, "kernel_size", 2, {});
    if (!ksize || ksize->empty()) return std::nullopt;
    auto strides = IntsArg(op, "stride", 2, *ksize);
    auto pads = IntsArg(op, "padding", 2, {0, 0});
    if (!strides || !pads || !FalseOrAbsent(op, "ceil_mode") ||
        (kind == "max_pool2d" && !AllOnes(IntsArg(op, "dilation", 2, {1, 1})))) {
      return std::nullopt;
    }
    NodeDef& pool = chain.Add("", kind == "max_pool2d" ? "MaxPool" : "AvgPool", {0});
    SetInts(pool, "ksize", *ksize);
    SetInts(pool, "strides", *strides);
    SetInts(pool, "pads", *pads);
    return chain.Verify();
  }
  static const std::pair<const char*, const char*> kUnary[] = {
      {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"}, {"softmax", "Softmax"}};
  for (const auto& [from, to] : kUnary) {
    if (kind == from && n == 1) {
      chain.Add("", to, {0});
      return chain.Verify();
    }
  }
  static const std::pair<const char*, const char*> kBinary[] = {
      {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}};
  for (const auto& [from, to] : kBinary) {
    if (kind == from && n == 2) {
      std::optional<int64_t> alpha = IntArg(op, "alpha");
      if (alpha.has_value() && *alpha != 1) return std::nullopt;
      chain.Add("", to, {0, 1});
      return chain.Verify();
    }
  }
  if (kind == "flatten" && n == 1) {
    std::optional<int64_t> start = IntArg(op, "start_dim");
    std::optional<int64_t> end = IntArg(op, "end_dim");
    if (end.has_value() && *end != -1 && *end != in[0].spec.shape_size() - 1) {
      return std::nullopt;
    }
    (*chain.Add("", "Flatten", {0}).mutable_attr())["axis"].set_i(start.value_or(0));
    return chain.Verify();
  }
  if ((kind == "view" || kind == "reshape" || kind == "_unsafe_view") && n == 1 &&
      op.output_spec_size() == 1) {
    SetInts(chain.Add("", "Reshape", {0}), "shape",
            std::vector<int64_t>(op.output_spec(0).shape().begin(),
                                 op.output_spec(0).shape().end()));
    return chain.Verify();
  }
  if (kind == "matmul" && n == 2) {
    chain.Add("", "MatMul", {0, 1});
    return chain.Verify();
  }
  if (kind == "cat" && n >= 1) {
    std::vector<int> all;
    for (int i = 0; i < n; ++i) all.push_back(i);
    (*chain.Add("", "Concat", all).mutable_attr())["axis"].set_i(
        IntArg(op, "dim").value_or(0));
    return chain.Verify();
  }
  if ((kind == "mean" || kind == "sum") && n == 1) {
    const AttrValue* dim = Arg(op, "dim");
    if (dim == nullptr) return std::nullopt;
    NodeDef& reduce = chain.Add("", kind == "mean" ? "ReduceMean" : "ReduceSum", {0});
    if (dim->has_i()) {
      SetInts(reduce, "axes", {dim->i()});
    } else {
      SetInts(reduce, "axes", std::vector<int64_t>(dim->ints().begin(), dim->ints().end()));
    }
    (*reduce.mutable_attr())["keep_dims"].set_b(!FalseOrAbsent(op, "keepdim"));
    return chain.Verify();
  }
  return std::nullopt;
}

}  // namespace

std::string ShortKind(absl::string_view kind) {
  const size_t colons = kind.rfind("::");
  absl::string_view s = colons == absl::string_view::npos ? kind : kind.substr(colons + 2);
  if (s.size() > 1 && s.back() == '_' && s.front() != '_') s.remove_suffix(1);
  return std::string(s);
}

MappedOp MapTracedOp(const TracedOp& op, const std::vector<MappedInput>& inputs,
                     const std::string& name) {
  if (std::optional<MappedOp> known = MapKnown(op, inputs, name); known.has_value()) {
    return *std::move(known);
  }
  MappedOp opaque;
  NodeDef& node = opaque.nodes.emplace_back();
  node.set_name(name);
  node.set_op("Opaque");
  // In-place and out-of-place variants are the same op here.
  const size_t colons = op.kind().rfind("::");
  (*node.mutable_attr())["op"].set_s(absl::StrCat(
      colons == std::string::npos ? "" : op.kind().substr(0, colons + 2),
      ShortKind(op.kind())));
  for (const MappedInput& in : inputs) node.add_input(in.ref);
  for (const TensorSpec& spec : op.output_spec()) *node.add_output() = spec;
  return opaque;
}

}  // namespace rdmaflow::graph::internal
