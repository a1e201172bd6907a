// File: internal/structure.cc
// Structural validation and scheduling (Kahn's algorithm, ties broken by the
// order of the GraphDef so that plans are deterministic).
#include "graph_analyzer/internal/structure.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "graph_analyzer/op_registry.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/tensor_ref.h"

namespace rdmaflow::graph::internal {
namespace {

absl::Status NodeError(const NodeDef& node, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node.name(), "' (op ", node.op(), "): ", problem));
}

absl::Status CheckNames(const GraphDef& graph, Structure& s) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& node = graph.node(i);
    if (node.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node #", i, " (op ", node.op(), ") has no name"));
    }
    if (node.name().find(':') != std::string::npos) {
      return NodeError(node,
                       "name may not contain ':' (it separates the output "
                       "index in input references)");
    }
    if ((absl::StartsWith(node.name(), "_send/") && node.op() != "Send") ||
        (absl::StartsWith(node.name(), "_recv/") && node.op() != "Recv")) {
      return NodeError(node, "names starting with '_send/' or '_recv/' are "
                             "reserved for the partitioner's Send and Recv");
    }
    auto [it, inserted] = s.index.emplace(node.name(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate node name '", node.name(), "' (nodes #",
                       it->second, " and #", i, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPlacement(const GraphDef& graph, Structure& s) {
  if (graph.world_size() < 0 || graph.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size ", graph.world_size(), " is not in 0 .. ",
                     kMaxWorldSize, " (0: derive it from the ranks)"));
  }
  int max_rank = -1;
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& node = graph.node(i);
    if (!node.has_rank()) {
      return NodeError(node, "is not placed: set 'rank' to the process that "
                             "runs it");
    }
    if (node.rank() < 0 || node.rank() >= kMaxWorldSize) {
      return NodeError(node, absl::StrCat("rank ", node.rank(),
                                          " is not in 0 .. ",
                                          kMaxWorldSize - 1));
    }
    if (graph.world_size() > 0 && node.rank() >= graph.world_size()) {
      return NodeError(node,
                       absl::StrCat("rank ", node.rank(),
                                    " is outside the world of ",
                                    graph.world_size(), " ranks"));
    }
    if (!Memory_IsValid(node.memory())) {
      return NodeError(node, absl::StrCat("memory ", static_cast<int>(node.memory()),
                                          " is neither MEMORY_HOST nor MEMORY_DEVICE"));
    }
    s.nodes[i].rank = node.rank();
    max_rank = std::max(max_rank, node.rank());
  }
  s.world_size = graph.world_size() > 0 ? graph.world_size() : max_rank + 1;
  return absl::OkStatus();
}

absl::Status CheckOpsAndInputs(const GraphDef& graph, Structure& s) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& node = graph.node(i);
    const OpDef* op = FindOp(node.op());
    if (op == nullptr) {
      return NodeError(node, absl::StrCat("unknown op '", node.op(),
                                          "'; known ops: ",
                                          absl::StrJoin(KnownOps(), ", ")));
    }
    int n = node.input_size();
    if (n < op->min_inputs || (op->max_inputs != kVariadic &&
                               n > op->max_inputs)) {
      std::string want =
          op->max_inputs == op->min_inputs
              ? absl::StrCat(op->min_inputs)
              : op->max_inputs == kVariadic
                    ? absl::StrCat("at least ", op->min_inputs)
                    : absl::StrCat(op->min_inputs, " .. ", op->max_inputs);
      return NodeError(node,
                       absl::StrCat("takes ", want, " input(s), got ", n));
    }
    for (const std::string& input : node.input()) {
      absl::StatusOr<TensorRef> ref = ParseTensorRef(input);
      if (!ref.ok()) return NodeError(node, ref.status().message());
      auto it = s.index.find(ref->node);
      if (it == s.index.end()) {
        return NodeError(node, absl::StrCat("input '", input,
                                            "' names unknown node '",
                                            ref->node, "'"));
      }
      s.nodes[i].inputs.push_back(OutputId{it->second, ref->output});
    }
    for (int k = 0; k < node.output_size(); ++k) {
      absl::Status valid = CheckSpec(node.output(k));
      if (!valid.ok()) {
        return NodeError(node, absl::StrCat("declared output ", k, ": ",
                                            valid.message()));
      }
    }
  }
  return absl::OkStatus();
}

// Some node is left unscheduled: follow unscheduled inputs backwards until a
// node repeats; that loop is a cycle.
absl::Status CycleError(const GraphDef& graph, const Structure& s,
                        const std::vector<int>& pending) {
  int start = 0;
  while (pending[start] == 0) ++start;
  std::vector<int> order_seen(graph.node_size(), -1);
  std::vector<int> path;
  int node = start;
  while (order_seen[node] < 0) {
    order_seen[node] = path.size();
    path.push_back(node);
    for (const OutputId& in : s.nodes[node].inputs) {
      if (pending[in.node] > 0) {
        node = in.node;
        break;
      }
    }
  }
  // path[order_seen[node]..] is the cycle, walked against the edges; report
  // it along the edges, starting from the node listed first in the graph.
  std::vector<int> cycle(path.rbegin(), path.rend() - order_seen[node]);
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()),
              cycle.end());
  std::vector<std::string> names;
  for (int i : cycle) names.push_back(graph.node(i).name());
  names.push_back(names.front());
  return absl::InvalidArgumentError(
      absl::StrCat("cycle: ", absl::StrJoin(names, " -> ")));
}

absl::Status Schedule(const GraphDef& graph, Structure& s) {
  int n = graph.node_size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    for (const OutputId& in : s.nodes[i].inputs) {
      ++pending[i];
      users[in.node].push_back(i);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    s.nodes[i].position = s.schedule.size();
    s.schedule.push_back(i);
    for (int user : users[i]) {
      if (--pending[user] == 0) ready.push(user);
    }
  }
  if (static_cast<int>(s.schedule.size()) != n) {
    return CycleError(graph, s, pending);
  }
  return absl::OkStatus();
}

// The declared outputs refine the inferred ones; any disagreement is an
// error.
absl::Status MergeDeclared(const NodeDef& node,
                           std::vector<TensorSpec>& outputs) {
  if (node.output_size() == 0) return absl::OkStatus();
  if (node.output_size() != static_cast<int>(outputs.size())) {
    return NodeError(node, absl::StrCat("declares ", node.output_size(),
                                        " output(s), the op produces ",
                                        outputs.size()));
  }
  for (int k = 0; k < node.output_size(); ++k) {
    const TensorSpec& declared = node.output(k);
    TensorSpec& inferred = outputs[k];
    bool same_rank = declared.shape_size() == inferred.shape_size();
    for (int d = 0; same_rank && d < declared.shape_size(); ++d) {
      same_rank = DimsCompatible(declared.shape(d), inferred.shape(d));
    }
    if (declared.dtype() != inferred.dtype() || !same_rank) {
      return NodeError(node, absl::StrCat("declared output ", k, " ",
                                          SpecString(declared),
                                          " contradicts the inferred ",
                                          SpecString(inferred)));
    }
    for (int d = 0; d < declared.shape_size(); ++d) {
      inferred.set_shape(d, MergeDim(inferred.shape(d), declared.shape(d)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Structure> CheckStructure(const GraphDef& graph) {
  Structure s;
  s.nodes.resize(graph.node_size());
  RETURN_IF_ERROR(CheckNames(graph, s));
  RETURN_IF_ERROR(CheckPlacement(graph, s));
  RETURN_IF_ERROR(CheckOpsAndInputs(graph, s));
  RETURN_IF_ERROR(Schedule(graph, s));
  return s;
}

absl::Status InferShapes(const GraphDef& graph, const std::vector<int>& schedule,
                         std::vector<AnalyzedNode>& nodes) {
  for (int i : schedule) {
    const NodeDef& node = graph.node(i);
    std::vector<const TensorSpec*> inputs;
    for (int k = 0; k < node.input_size(); ++k) {
      OutputId in = nodes[i].inputs[k];
      const std::vector<TensorSpec>& produced = nodes[in.node].outputs;
      if (in.output >= static_cast<int>(produced.size())) {
        return NodeError(node, absl::StrCat(
                                   "input '", node.input(k), "': node '",
                                   graph.node(in.node).name(), "' (op ",
                                   graph.node(in.node).op(), ") has ",
                                   produced.size(), " output(s)"));
      }
      inputs.push_back(&produced[in.output]);
    }
    ShapeContext context(node, std::move(inputs));
    absl::StatusOr<std::vector<TensorSpec>> outputs =
        FindOp(node.op())->shape_fn(context);
    if (!outputs.ok()) return NodeError(node, outputs.status().message());
    RETURN_IF_ERROR(MergeDeclared(node, *outputs));
    for (size_t k = 0; k < outputs->size(); ++k) {
      absl::Status valid = CheckSpec((*outputs)[k]);
      if (!valid.ok()) {
        return NodeError(node, absl::StrCat("output ", k, ": ",
                                            valid.message()));
      }
    }
    nodes[i].outputs = *std::move(outputs);
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::graph::internal
