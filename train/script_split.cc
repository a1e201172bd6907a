// File: script_split.cc
#include "train/script_split.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "strategies/exception_text.h"
#include "torch/csrc/jit/api/function_impl.h"
#include "torch/csrc/jit/ir/ir.h"
#include "torch/csrc/jit/passes/dead_code_elimination.h"
#include "torch/csrc/jit/passes/inliner.h"

namespace rdmaflow::train {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

absl::Status Invalid(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "this TorchScript model cannot be cut before its first fully connected layer: ",
      why));
}

// The dotted attribute path of a prim::GetAttr chain from the module
// ("fc1.weight"), or "" when `v` is not one.
std::string AttributePath(Value* v, Value* self) {
  std::vector<std::string> parts;
  while (v != self) {
    Node* n = v->node();
    if (n->kind() != c10::prim::GetAttr) return "";
    parts.insert(parts.begin(), n->s(c10::attr::name));
    v = n->input(0);
  }
  std::string path;
  for (const std::string& p : parts) path += (path.empty() ? "" : ".") + p;
  return path;
}

// What `node` reads: its inputs and the values its blocks (If, Loop) use
// that are defined outside it.
std::vector<Value*> Reads(Node* node) {
  std::vector<Value*> reads(node->inputs().begin(), node->inputs().end());
  std::vector<torch::jit::Block*> blocks(node->blocks().begin(), node->blocks().end());
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (Node* inner : block->nodes()) {
      for (Value* v : inner->inputs()) {
        if (!v->node()->isDominatedBy(node) && v->node() != node) reads.push_back(v);
      }
      for (torch::jit::Block* b : inner->blocks()) blocks.push_back(b);
    }
    for (Value* v : block->outputs()) {
      if (!v->node()->isDominatedBy(node) && v->node() != node) reads.push_back(v);
    }
  }
  return reads;
}

// The module's parameters `graph` reads (prim::GetAttr chains from its
// first input that something uses), by dotted name.
std::unordered_set<std::string> ParametersRead(Graph& graph,
                                               const std::unordered_set<std::string>& names) {
  std::unordered_set<std::string> read;
  Value* self = graph.inputs()[0];
  std::vector<torch::jit::Block*> blocks = {graph.block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (Node* n : block->nodes()) {
      if (n->kind() == c10::prim::GetAttr && n->output()->hasUses()) {
        const std::string path = AttributePath(n->output(), self);
        if (names.count(path) != 0) read.insert(path);
      }
      for (torch::jit::Block* b : n->blocks()) blocks.push_back(b);
    }
  }
  return read;
}

// A function running `graph` with the module as its first input.
std::shared_ptr<torch::jit::GraphFunction> Function(const std::string& name,
                                                    std::shared_ptr<Graph> graph) {
  return std::make_shared<torch::jit::GraphFunction>(name, std::move(graph), nullptr);
}

}  // namespace

absl::StatusOr<strategies::ModelSplit> SplitScript(std::shared_ptr<torch::jit::Module> script,
                                                   const SampleSpec& sample) {
  if (sample.int64) {
    // layer_separated times and feeds its halves with float samples.
    return Invalid("it takes float samples, not token ids (--input N:int64)");
  }
  try {
    std::shared_ptr<Graph> graph = script->get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    if (graph->inputs().size() != 2 || graph->outputs().size() != 1) {
      return Invalid("its forward must take one tensor and return one");
    }
    Value* self = graph->inputs()[0];
    Value* x = graph->inputs()[1];
    std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
    size_t first_linear = nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i]->kind() == c10::aten::linear) {
        first_linear = i;
        break;
      }
    }
    if (first_linear == nodes.size()) return Invalid("its forward has no aten::linear");
    Value* cut = nodes[first_linear]->input(0);
    // Values computed from the input before the cut: only `cut` may cross.
    std::unordered_set<Value*> from_input = {x};
    for (size_t i = 0; i < first_linear; ++i) {
      for (Value* in : Reads(nodes[i])) {
        if (from_input.count(in) != 0) {
          for (Value* out : nodes[i]->outputs()) from_input.insert(out);
          break;
        }
      }
    }
    if (from_input.count(cut) == 0) {
      // A tensor filled in place (h = zeros(); h.add_(x)) lands here too: the
      // graph's value is the one before the write.
      return Invalid("the first linear layer does not read a value computed from the input "
                     "(a learned query, or a tensor filled in place)");
    }
    // features(self, x) = cut: the nodes before the first linear.
    auto features = std::make_shared<Graph>();
    std::unordered_map<Value*, Value*> fmap = {
        {self, features->addInput("self")->setType(self->type())},
        {x, features->addInput("x")->setType(x->type())}};
    auto lookup = [](std::unordered_map<Value*, Value*>& map, Value* v) -> Value* {
      const auto it = map.find(v);
      if (it == map.end()) {
        throw std::runtime_error(absl::StrCat(
            "'", v->debugName(), "' crosses from the features to the head beside the cut "
            "(a connection over it)"));
      }
      return it->second;
    };
    for (size_t i = 0; i < first_linear; ++i) {
      Node* copy = features->insertNode(features->createClone(
          nodes[i], [&](Value* v) { return lookup(fmap, v); }));
      for (size_t k = 0; k < nodes[i]->outputs().size(); ++k) {
        fmap[nodes[i]->output(k)] = copy->output(k);
      }
    }
    features->registerOutput(fmap.at(cut));
    torch::jit::EliminateDeadCode(features);
    // head(self, h): what does not depend on the input before the cut, then
    // everything from the first linear on, `cut` read from h.
    auto head = std::make_shared<Graph>();
    std::unordered_map<Value*, Value*> hmap = {
        {self, head->addInput("self")->setType(self->type())},
        {cut, head->addInput("h")->setType(cut->type())}};
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* n = nodes[i];
      if (i < first_linear && (n->outputs().empty() || from_input.count(n->output(0)) != 0)) {
        continue;
      }
      for (Value* in : Reads(n)) lookup(hmap, in);  // names a crossing value
      Node* copy = head->insertNode(
          head->createClone(n, [&](Value* v) { return lookup(hmap, v); }));
      for (size_t k = 0; k < n->outputs().size(); ++k) {
        if (n->output(k) != cut) hmap[n->output(k)] = copy->output(k);
      }
    }
    head->registerOutput(hmap.at(graph->outputs()[0]));
    torch::jit::EliminateDeadCode(head);
    // Each parameter on one side: the head's are updated on the FC ranks,
    // the rest on the conv ranks.
    std::unordered_set<std::string> parameter_names;
    for (const auto& p : script->named_parameters(/*recurse=*/true)) parameter_names.insert(p.name);
    const std::unordered_set<std::string> in_features = ParametersRead(*features, parameter_names);
    const std::unordered_set<std::string> in_head = ParametersRead(*head, parameter_names);
    std::vector<std::string> head_parameters;
    for (const auto& p : script->named_parameters(/*recurse=*/true)) {
      if (in_features.count(p.name) != 0 && in_head.count(p.name) != 0) {
        return Invalid(absl::StrCat("parameter '", p.name, "' is read on both sides of the cut"));
      }
      if (in_head.count(p.name) != 0) head_parameters.push_back(p.name);
    }

    strategies::ModelSplit split;
    auto run_features = Function("features", features);
    auto run_head = Function("head", head);
    const c10::IValue module = script->_ivalue();
    split.features = [run_features, module](const torch::Tensor& in) {
      return (*run_features)({module, in}).toTensor();
    };
    split.head = [run_head, module](const torch::Tensor& in) {
      return (*run_head)({module, in}).toTensor();
    };
    split.head_parameters = std::move(head_parameters);
    split.sample_shape = sample.shape;
    std::vector<int64_t> probe_shape = {2};
    probe_shape.insert(probe_shape.end(), sample.shape.begin(), sample.shape.end());
    // The activations' shape, in eval mode: the probe must not move batch
    // norm's running statistics.
    torch::NoGradGuard no_grad;
    const bool training = script->is_training();
    script->eval();
    torch::Tensor activations = split.features(torch::zeros(probe_shape));
    script->train(training);
    split.activation_shape.assign(activations.sizes().begin() + 1, activations.sizes().end());
    return split;
  } catch (const std::exception& e) {
    return Invalid(strategies::ExceptionText(e));
  }
}

}  // namespace rdmaflow::train
