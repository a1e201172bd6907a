// File: dot_writer.cc
#include "graph_analyzer/dot_writer.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/text_table.h"
#include "graph_analyzer/display_text.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {
namespace {

// A DOT double-quoted string. A newline becomes the label line break "\n";
// callers pass names through DisplayText first, so the only newlines left
// are the ones they put between a label's lines.
std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

// A node's DOT id: its name, escaped and quoted.
std::string Id(const std::string& name) { return Quote(DisplayText(name)); }

}  // namespace

std::string GraphToDot(const AnalyzedGraph& graph) {
  std::string out = absl::StrCat("digraph ", Id(graph.graph().name()),
                                 " {\n  rankdir=TB;\n"
                                 "  node [shape=box, fontsize=10];\n"
                                 "  edge [fontsize=9];\n");
  for (int r = 0; r < graph.world_size(); ++r) {
    absl::StrAppend(&out, "  subgraph cluster_rank", r, " {\n    label=",
                    Quote(absl::StrCat("rank ", r)),
                    ";\n    style=rounded;\n");
    for (int node : graph.schedule()) {
      if (graph.node(node).rank != r) continue;
      const NodeDef& def = graph.def(node);
      absl::StrAppend(&out, "    ", Id(def.name()), " [label=",
                      Quote(absl::StrCat(DisplayText(def.name()), "\n",
                                         DisplayText(def.op()))),
                      "];\n");
    }
    absl::StrAppend(&out, "  }\n");
  }
  for (int node : graph.schedule()) {
    const AnalyzedNode& n = graph.node(node);
    for (const OutputId& in : n.inputs) {
      std::string edge = absl::StrCat("  ", Id(graph.def(in.node).name()),
                                      " -> ", Id(graph.def(node).name()));
      if (graph.node(in.node).rank == n.rank) {
        absl::StrAppend(&out, edge, ";\n");
        continue;
      }
      const TensorSpec& spec = graph.spec(in);
      std::optional<int64_t> bytes = NumBytes(spec);
      std::string label =
          bytes.has_value() ? FormatBytes(*bytes) : std::string("dynamic");
      absl::StrAppend(&out, edge, " [label=",
                      Quote(absl::StrCat(label, "\n", SpecString(spec))),
                      ", style=bold, color=", bytes ? "blue" : "red",
                      "];\n");
    }
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace rdmaflow::graph
