// File: stanza_graph.cc
#include "strategies/layer_separated/stanza_graph.h"

#include "absl/strings/str_cat.h"
#include "graph_analyzer/graph_builder.h"

namespace rdmaflow::strategies::layer_separated {

std::vector<int> StanzaLayout::Served(int fc_index) const {
  std::vector<int> out;
  for (int i = fc_index; i < conv_ranks; i += fc_ranks) out.push_back(i);
  return out;
}

std::string ActTensor(int conv) { return absl::StrCat("c", conv, "/act:0"); }
std::string LabelsTensor(int conv) { return absl::StrCat("c", conv, "/labels:0"); }
std::string GradTensor(int fc_index, int conv) {
  return absl::StrCat("f", fc_index, "/grad_c", conv, ":0");
}
std::string StatsTensor(int fc_index, int conv) {
  return absl::StrCat("f", fc_index, "/stats_c", conv, ":0");
}

graph::GraphDef BuildStanzaGraph(const StanzaLayout& layout, bool on_device) {
  graph::GraphBuilder b("layer_separated");
  b.SetWorldSize(layout.conv_ranks + layout.fc_ranks);
  const graph::Memory device = on_device ? graph::MEMORY_DEVICE : graph::MEMORY_HOST;
  std::vector<int64_t> act = {layout.batch};
  act.insert(act.end(), layout.activation_shape.begin(), layout.activation_shape.end());
  for (int i = 0; i < layout.conv_ranks; ++i) {
    const int fc = layout.FcRankOf(i);
    const int k = fc - layout.conv_ranks;
    b.SetRank(i);
    b.SetMemory(device);
    const std::string a = b.Placeholder(absl::StrCat("c", i, "/act"), graph::DT_FLOAT32, act);
    b.SetMemory(graph::MEMORY_HOST);
    const std::string y =
        b.Placeholder(absl::StrCat("c", i, "/labels"), graph::DT_INT64, {layout.batch});
    b.SetRank(fc);
    b.SetMemory(device);
    b.Op(absl::StrCat("f", k, "/act_c", i), "Identity", {a});
    b.Op(absl::StrCat("f", k, "/labels_c", i), "Identity", {y});
    const std::string g =
        b.Placeholder(absl::StrCat("f", k, "/grad_c", i), graph::DT_FLOAT32, act);
    b.SetMemory(graph::MEMORY_HOST);
    const std::string s =
        b.Placeholder(absl::StrCat("f", k, "/stats_c", i), graph::DT_FLOAT32, {2});
    b.SetRank(i);
    b.SetMemory(device);
    b.Op(absl::StrCat("c", i, "/grad"), "Identity", {g});
    b.SetMemory(graph::MEMORY_HOST);
    b.Op(absl::StrCat("c", i, "/stats"), "Identity", {s});
  }
  return std::move(b).Build();
}

}  // namespace rdmaflow::strategies::layer_separated
