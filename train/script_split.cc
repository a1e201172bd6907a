// File: script_split.cc
#include "train/script_split.h"

#include <algorithm>
#include <exception>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
      "layer_separated cannot cut this TorchScript model before its first fully "
      "connected layer: ", why));
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

// A function running `graph` with the module as its first input.
std::shared_ptr<torch::jit::GraphFunction> Function(const std::string& name,
                                                    std::shared_ptr<Graph> graph) {
  return std::make_shared<torch::jit::GraphFunction>(name, std::move(graph), nullptr);
}

}  // namespace

absl::StatusOr<strategies::ModelSplit> SplitScript(std::shared_ptr<torch::jit::Module> script,
                                                   const SampleSpec& sample) {
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
      for (Value* in : nodes[i]->inputs()) {
        if (from_input.count(in) != 0) {
          for (Value* out : nodes[i]->outputs()) from_input.insert(out);
          break;
        }
      }
    }
    // features(self, x) = cut: the nodes before the first linear.
    auto features = std::make_shared<Graph>();
    std::unordered_map<Value*, Value*> fmap = {
        {self, features->addInput("self")->setType(self->type())},
        {x, features->addInput("x")->setType(x->type())}};
    for (size_t i = 0; i < first_linear; ++i) {
      Node* copy = features->insertNode(
          features->createClone(nodes[i], [&](Value* v) { return fmap.at(v); }));
      for (size_t k = 0; k < nodes[i]->outputs().size(); ++k) {
        fmap[nodes[i]->output(k)] = copy->output(k);
      }
    }
    features->registerOutput(fmap.at(cut));
    // head(self, h): what does not depend on the input before the cut, then
    // everything from the first linear on, `cut` read from h.
    auto head = std::make_shared<Graph>();
    std::unordered_map<Value*, Value*> hmap = {
        {self, head->addInput("self")->setType(self->type())},
        {cut, head->addInput("h")->setType(cut->type())}};
    std::vector<std::string> head_parameters;
    std::unordered_set<std::string> parameter_names;
    for (const auto& p : script->named_parameters(/*recurse=*/true)) parameter_names.insert(p.name);
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* n = nodes[i];
      if (i < first_linear && (n->outputs().empty() || from_input.count(n->output(0)) != 0)) {
        continue;
      }
      for (Value* in : n->inputs()) {
        if (hmap.count(in) == 0) {
          return Invalid(absl::StrCat("'", in->debugName(),
                                      "' crosses from the features to the head beside the "
                                      "cut (a connection over it)"));
        }
      }
      Node* copy = head->insertNode(head->createClone(n, [&](Value* v) { return hmap.at(v); }));
      for (size_t k = 0; k < n->outputs().size(); ++k) hmap[n->output(k)] = copy->output(k);
      if (i >= first_linear) {
        for (Value* in : n->inputs()) {
          const std::string path = AttributePath(in, self);
          if (!path.empty() && parameter_names.count(path) != 0 &&
              std::find(head_parameters.begin(), head_parameters.end(), path) ==
                  head_parameters.end()) {
            head_parameters.push_back(path);
          }
        }
      }
    }
    head->registerOutput(hmap.at(graph->outputs()[0]));
    torch::jit::EliminateDeadCode(head);

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
    torch::NoGradGuard no_grad;
    torch::Tensor probe = sample.int64 ? torch::zeros(probe_shape, torch::kInt64)
                                       : torch::zeros(probe_shape);
    torch::Tensor activations = split.features(probe);
    split.activation_shape.assign(activations.sizes().begin() + 1, activations.sizes().end());
    return split;
  } catch (const std::exception& e) {
    return Invalid(e.what());
  }
}

}  // namespace rdmaflow::train
