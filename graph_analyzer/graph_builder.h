// File: graph_builder.h
// -----------------------------------------------------------------------------
// GraphBuilder: builds a GraphDef in C++.
//
//   GraphBuilder b("mlp");
//   b.SetRank(0);
//   std::string x = b.Placeholder("x", DT_FLOAT32, {32, 784});
//   std::string w = b.Variable("w1", DT_FLOAT32, {784, 256});
//   std::string h = b.Op("h1", "MatMul", {x, w}).out();
//   b.SetRank(1);
//   b.Op("act1", "Relu", {h});
//   GraphDef graph = std::move(b).Build();
//
// The builder does not validate; AnalyzeGraph (analyzed_graph.h) does.
#ifndef RDMAFLOW_GRAPH_ANALYZER_GRAPH_BUILDER_H_
#define RDMAFLOW_GRAPH_ANALYZER_GRAPH_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

// Sets the fields of one node. Valid while its GraphBuilder lives.
// Thread-compatible.
class NodeBuilder {
 public:
  explicit NodeBuilder(NodeDef* node) : node_(node) {}

  NodeBuilder& Input(absl::string_view tensor);
  NodeBuilder& Attr(absl::string_view name, int64_t value);
  NodeBuilder& Attr(absl::string_view name, int value) {
    return Attr(name, static_cast<int64_t>(value));
  }
  NodeBuilder& Attr(absl::string_view name, double value);
  NodeBuilder& Attr(absl::string_view name, const char* value);
  NodeBuilder& Attr(absl::string_view name, const std::string& value);
  NodeBuilder& Attr(absl::string_view name, bool value);
  NodeBuilder& Attr(absl::string_view name, std::vector<int64_t> values);
  NodeBuilder& Attr(absl::string_view name, DataType value);
  // Declares the next output's spec.
  NodeBuilder& Output(DataType dtype, std::vector<int64_t> shape);
  NodeBuilder& Rank(int rank);

  // "name:k": the k-th output, for use as another node's input.
  std::string out(int k = 0) const;
  const NodeDef& def() const { return *node_; }

 private:
  AttrValue& MutableAttr(absl::string_view name);

  NodeDef* node_;
};

// Accumulates nodes. Thread-compatible.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name);

  // Rank given to nodes added from now on (default 0).
  void SetRank(int rank) { rank_ = rank; }
  // Where the nodes added from now on keep their outputs (host by default).
  void SetMemory(Memory memory) { memory_ = memory; }
  void SetWorldSize(int world_size) { graph_.set_world_size(world_size); }

  // A node running `op` on the current rank with `inputs`.
  NodeBuilder Op(absl::string_view name, absl::string_view op,
                 std::vector<std::string> inputs = {});
  // Sources: return the tensor name ("name:0").
  std::string Placeholder(absl::string_view name, DataType dtype,
                          std::vector<int64_t> shape);
  std::string Variable(absl::string_view name, DataType dtype,
                       std::vector<int64_t> shape);

  GraphDef Build() && { return std::move(graph_); }
  const GraphDef& graph() const { return graph_; }

 private:
  GraphDef graph_;
  int rank_ = 0;
  Memory memory_ = MEMORY_HOST;
};

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_GRAPH_BUILDER_H_
