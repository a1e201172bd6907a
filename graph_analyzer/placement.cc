// File: placement.cc
#include "graph_analyzer/placement.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/size_balance.h"
#include "graph_analyzer/tensor_ref.h"

namespace rdmaflow::graph {
namespace {

constexpr int kMaxRanks = 1024;
// A parameter's bytes as sharding counts them when they overflow.
constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

std::string Anchor(const std::string& name) { return name.substr(0, name.find('/')); }

// Where each replica's copy of a node runs, and who owns each parameter.
struct Layout {
  std::vector<std::string> prefixes;  // one per replica
  int world = 0;
  // Rank of replica r's copy of a (non-parameter, non-update) node.
  std::function<int(int r, const NodeDef&)> rank_of;
  // The variable replica r reads for parameter p: its name and rank.
  std::function<std::pair<std::string, int>(int r, const NodeDef& p)> owner_of;
};

// The parameters' bytes, for sharding.
int64_t Bytes(const NodeDef& variable) {
  if (variable.output_size() != 1) return 0;
  return NumBytes(variable.output(0)).value_or(kMaxBytes);
}

class Placer {
 public:
  Placer(const GraphDef& model, const AnalyzedGraph& analyzed)
      : model_(model), analyzed_(analyzed) {}

  absl::Status Index() {
    for (int i = 0; i < model_.node_size(); ++i) {
      const NodeDef& n = model_.node(i);
      if (n.has_rank() && n.rank() != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "placement: node '", n.name(), "' is on rank ", n.rank(),
            "; the model's graph must be on rank 0 only (a single-rank training "
            "step, as rdmaflow plan MODEL.pt or export_graph writes it)"));
      }
      index_[n.name()] = i;
      if (n.op() == "Variable") params_.push_back(i);
    }
    if (params_.empty()) {
      return absl::InvalidArgumentError(
          "placement: the model's graph has no Variable (parameter): nothing to place");
    }
    return absl::OkStatus();
  }

  const std::vector<int>& params() const { return params_; }
  const GraphDef& model() const { return model_; }
  int IndexOf(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }

  // The nodes in an order where every node comes after its inputs.
  absl::Span<const int> schedule() const { return analyzed_.schedule(); }
  // The names of the nodes node `i` reads.
  std::vector<std::string> Sources(int i) const {
    std::vector<std::string> out;
    for (const OutputId& in : analyzed_.node(i).inputs) {
      out.push_back(model_.node(in.node).name());
    }
    return out;
  }

  // Gradient nodes and everything computed from them (one pass, in
  // schedule order).
  absl::flat_hash_set<std::string> Backward() const {
    absl::flat_hash_set<std::string> backward;
    for (int i : schedule()) {
      const NodeDef& n = model_.node(i);
      bool b = n.op() == "Gradient";
      for (const OutputId& in : analyzed_.node(i).inputs) {
        b = b || backward.contains(model_.node(in.node).name());
      }
      if (b) backward.insert(n.name());
    }
    return backward;
  }

  GraphDef Emit(const Layout& layout, const std::string& name) const {
    GraphDef out;
    out.set_name(name);
    out.set_world_size(layout.world);
    const int replicas = static_cast<int>(layout.prefixes.size());
    // Variables, once per owner.
    absl::flat_hash_set<std::string> made;
    for (int p : params_) {
      for (int r = 0; r < replicas; ++r) {
        auto [var, rank] = layout.owner_of(r, model_.node(p));
        if (!made.insert(var).second) continue;
        NodeDef& v = *out.add_node();
        v = model_.node(p);
        v.set_name(var);
        v.set_rank(rank);
      }
    }
    // Each replica's step, reading its owners' variables.
    absl::flat_hash_map<std::string, std::vector<std::string>> grads;  // owner -> grads
    std::vector<std::string> owners;
    for (int r = 0; r < replicas; ++r) {
      const std::string& prefix = layout.prefixes[r];
      for (const NodeDef& n : model_.node()) {
        if (n.op() == "Variable") continue;
        if (n.op() == "ApplyGradient" && n.input_size() >= 2) {
          const int p = IndexOf(ParseTensorRef(n.input(0))->node);
          if (p < 0 || model_.node(p).op() != "Variable") continue;
          const std::string var = layout.owner_of(r, model_.node(p)).first;
          if (!grads.contains(var)) owners.push_back(var);
          grads[var].push_back(Rename(n.input(1), r, layout));
          continue;
        }
        NodeDef& copy = *out.add_node();
        copy = n;
        copy.set_name(prefix + n.name());
        copy.set_rank(layout.rank_of(r, n));
        for (int k = 0; k < copy.input_size(); ++k) {
          copy.set_input(k, Rename(n.input(k), r, layout));
        }
      }
    }
    // One update per owner, with the gradients of every replica it serves.
    for (const std::string& var : owners) {
      NodeDef& apply = *out.add_node();
      apply.set_name(absl::StrCat(var, "/apply"));
      apply.set_op("ApplyGradient");
      apply.add_input(absl::StrCat(var, ":0"));
      for (const std::string& g : grads[var]) apply.add_input(g);
      apply.set_rank(owner_rank_.at(var));
    }
    return out;
  }

  // Remembers each owner's rank (for its update).
  void Register(const Layout& layout) {
    for (int p : params_) {
      for (size_t r = 0; r < layout.prefixes.size(); ++r) {
        auto [var, rank] = layout.owner_of(static_cast<int>(r), model_.node(p));
        owner_rank_[var] = rank;
      }
    }
  }

 private:
  std::string Rename(const std::string& input, int r, const Layout& layout) const {
    absl::StatusOr<TensorRef> ref = ParseTensorRef(input);
    if (!ref.ok()) return input;  // AnalyzeGraph reports it
    const int i = IndexOf(ref->node);
    if (i >= 0 && model_.node(i).op() == "Variable") {
      return absl::StrCat(layout.owner_of(r, model_.node(i)).first, ":", ref->output);
    }
    return absl::StrCat(layout.prefixes[r], ref->node, ":", ref->output);
  }

  const GraphDef& model_;
  const AnalyzedGraph& analyzed_;
  absl::flat_hash_map<std::string, int> index_;
  std::vector<int> params_;
  absl::flat_hash_map<std::string, int> owner_rank_;
};

absl::StatusOr<Layout> PsLayout(const Placer& placer, const PlacementSpec& spec) {
  Layout layout;
  layout.world = spec.servers + spec.workers;
  for (int w = 0; w < spec.workers; ++w) layout.prefixes.push_back(absl::StrCat("w", w, "/"));
  // Largest first onto the least loaded server, as the ps strategy shards.
  std::vector<int64_t> sizes;
  for (int p : placer.params()) sizes.push_back(Bytes(placer.model().node(p)));
  const std::vector<int> bins = BalanceBySize(sizes, spec.servers);
  auto server = std::make_shared<absl::flat_hash_map<std::string, int>>();
  for (size_t i = 0; i < bins.size(); ++i) {
    (*server)[placer.model().node(placer.params()[i]).name()] = bins[i];
  }
  const int servers = spec.servers;
  layout.rank_of = [servers](int r, const NodeDef&) { return servers + r; };
  layout.owner_of = [server](int, const NodeDef& p) {
    return std::make_pair(absl::StrCat("ps/", p.name()), server->at(p.name()));
  };
  return layout;
}

Layout AllReduceLayout(const PlacementSpec& spec) {
  Layout layout;
  layout.world = spec.workers;
  for (int w = 0; w < spec.workers; ++w) layout.prefixes.push_back(absl::StrCat("w", w, "/"));
  layout.rank_of = [](int r, const NodeDef&) { return r; };
  layout.owner_of = [](int r, const NodeDef& p) {
    return std::make_pair(absl::StrCat("w", r, "/", p.name()), r);
  };
  return layout;
}

absl::StatusOr<Layout> LayerSeparatedLayout(const Placer& placer, const PlacementSpec& spec) {
  const GraphDef& g = placer.model();
  const absl::flat_hash_set<std::string> backward = placer.Backward();
  auto is_param = [&](const std::string& name) {
    const int i = placer.IndexOf(name);
    return i >= 0 && g.node(i).op() == "Variable";
  };
  // The cut: given, or the producer of the first fully connected layer's
  // input (a MatMul reading a parameter).
  std::string cut = spec.cut;
  if (cut.empty()) {
    for (const NodeDef& n : g.node()) {
      if (n.op() != "MatMul" || backward.contains(n.name()) || n.input_size() != 2) continue;
      if (!is_param(ParseTensorRef(n.input(1))->node)) continue;
      cut = Anchor(std::string(ParseTensorRef(n.input(0))->node));
      break;
    }
    if (cut.empty()) {
      return absl::InvalidArgumentError(
          "layer_separated: the model has no fully connected layer to cut before; "
          "name the last feature node with cut=NODE");
    }
  }
  const int cut_index = placer.IndexOf(cut);
  if (cut_index < 0 || backward.contains(cut) || is_param(cut) ||
      Anchor(cut) != cut) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated: cut '", cut, "' is not a forward node of the model "
        "(name one of its ops, e.g. flatten_3, or an input)"));
  }
  // The head: forward nodes downstream of the cut (by anchor; one pass in
  // schedule order, which has every node after the nodes it reads).
  auto head = std::make_shared<absl::flat_hash_set<std::string>>();
  for (int i : placer.schedule()) {
    const NodeDef& n = g.node(i);
    if (backward.contains(n.name()) || n.op() == "Variable") continue;
    const std::string anchor = Anchor(n.name());
    if (head->contains(anchor)) continue;
    for (const std::string& in : placer.Sources(i)) {
      const std::string src = Anchor(in);
      if (src == cut || head->contains(src)) {
        head->insert(anchor);
        break;
      }
    }
  }
  if (head->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated: nothing follows cut '", cut, "': no layers are left for the "
        "FC ranks"));
  }
  // Head parameters and constants (buffers): read by head nodes only.
  absl::flat_hash_map<std::string, bool> head_param;
  absl::flat_hash_map<std::string, bool> head_const;
  for (int i : placer.schedule()) {
    const NodeDef& n = g.node(i);
    if (backward.contains(n.name()) || n.op() == "Variable" || n.op() == "ApplyGradient") {
      continue;
    }
    const bool h = head->contains(Anchor(n.name()));
    for (const std::string& src : placer.Sources(i)) {
      const int s = placer.IndexOf(src);
      if (s < 0) continue;
      const std::string& op = g.node(s).op();
      if (op != "Variable" && op != "Const") continue;
      auto& side = op == "Variable" ? head_param : head_const;
      auto [it, fresh] = side.emplace(src, h);
      if (!fresh) it->second = it->second && h;
    }
  }
  for (const auto& [name, on_head] : head_const) {
    if (on_head) head->insert(name);
  }
  auto params_on_head = std::make_shared<absl::flat_hash_map<std::string, bool>>(head_param);
  // A head parameter's gradient sum and update run with it.
  for (const auto& [param, on_head] : head_param) {
    if (on_head) head->insert(param);
  }
  Layout layout;
  const int conv = spec.conv_ranks;
  const int fc = spec.fc_ranks;
  layout.world = conv + fc;
  for (int c = 0; c < conv; ++c) layout.prefixes.push_back(absl::StrCat("c", c, "/"));
  layout.rank_of = [head, conv, fc](int r, const NodeDef& n) {
    return head->contains(Anchor(n.name())) ? conv + r % fc : r;
  };
  layout.owner_of = [params_on_head, conv, fc](int r, const NodeDef& p) {
    auto it = params_on_head->find(p.name());
    if (it != params_on_head->end() && it->second) {
      return std::make_pair(absl::StrCat("f", r % fc, "/", p.name()), conv + r % fc);
    }
    return std::make_pair(absl::StrCat("c", r, "/", p.name()), r);
  };
  return layout;
}

absl::Status SetCount(const std::string& strategy, const std::string& key,
                      const std::string& value, int* out) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < 1 || v > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy, ": ", key, "=", value, " is not a count in 1..", kMaxRanks));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlacementSpec> ParsePlacementSpec(absl::string_view text) {
  PlacementSpec spec;
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 1));
  spec.strategy = parts[0];
  absl::flat_hash_map<std::string, int*> counts;
  if (spec.strategy == "ps") {
    counts = {{"servers", &spec.servers}, {"workers", &spec.workers}};
  } else if (spec.strategy == "allreduce") {
    counts = {{"workers", &spec.workers}};
  } else if (spec.strategy == "layer_separated") {
    counts = {{"conv", &spec.conv_ranks}, {"fc", &spec.fc_ranks}};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown strategy '", spec.strategy,
        "' for a placement (known: ps, allreduce, layer_separated)"));
  }
  if (parts.size() < 2 || parts[1].empty()) return spec;
  for (absl::string_view item : absl::StrSplit(parts[1], ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.strategy, ": '", item, "' is not key=value"));
    }
    if (spec.strategy == "layer_separated" && kv[0] == "cut") {
      spec.cut = kv[1];
      continue;
    }
    auto it = counts.find(kv[0]);
    if (it == counts.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : counts) known.push_back(k);
      if (spec.strategy == "layer_separated") known.push_back("cut");
      std::sort(known.begin(), known.end());
      return absl::InvalidArgumentError(absl::StrCat(
          spec.strategy, ": unknown key '", kv[0], "' (known: ",
          absl::StrJoin(known, ", "), ")"));
    }
    RETURN_IF_ERROR(SetCount(spec.strategy, kv[0], kv[1], it->second));
  }
  return spec;
}

absl::StatusOr<GraphDef> PlaceTrainingGraph(const GraphDef& model,
                                            const PlacementSpec& spec) {
  // Checked first: every reference below then parses and resolves.
  absl::StatusOr<AnalyzedGraph> analyzed = AnalyzeGraph(model);
  if (!analyzed.ok()) {
    return absl::Status(analyzed.status().code(),
                        absl::StrCat("placement: ", analyzed.status().message()));
  }
  const int counts[] = {spec.servers, spec.workers, spec.conv_ranks, spec.fc_ranks};
  for (int count : counts) {
    if (count < 1 || count > kMaxRanks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: servers, workers, conv and fc ranks must be in 1..", kMaxRanks,
          " (got ", spec.servers, ", ", spec.workers, ", ", spec.conv_ranks, ", ",
          spec.fc_ranks, ")"));
    }
  }
  Placer placer(model, *analyzed);
  RETURN_IF_ERROR(placer.Index());
  Layout layout;
  if (spec.strategy == "ps") {
    ASSIGN_OR_RETURN(layout, PsLayout(placer, spec));
  } else if (spec.strategy == "allreduce") {
    layout = AllReduceLayout(spec);
  } else if (spec.strategy == "layer_separated") {
    ASSIGN_OR_RETURN(layout, LayerSeparatedLayout(placer, spec));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown strategy '", spec.strategy, "'"));
  }
  placer.Register(layout);
  return placer.Emit(layout, absl::StrCat(model.name(), " (", spec.strategy, ")"));
}

absl::StatusOr<absl::flat_hash_map<std::string, int>> PsParameterServers(
    const GraphDef& placed) {
  absl::flat_hash_map<std::string, int> servers;
  for (const NodeDef& node : placed.node()) {
    if (node.op() == "Variable" && absl::StartsWith(node.name(), "ps/")) {
      servers[node.name().substr(3)] = node.rank();
    }
  }
  if (servers.empty()) {
    return absl::InvalidArgumentError(
        "the graph holds no parameter server's parameters (no \"ps/\" variables): "
        "is it a ps placement?");
  }
  return servers;
}

}  // namespace rdmaflow::graph
