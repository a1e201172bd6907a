// File: graph_builder.cc
#include "graph_analyzer/graph_builder.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::graph {

NodeBuilder& NodeBuilder::Input(absl::string_view tensor) {
  node_->add_input(std::string(tensor));
  return *this;
}

AttrValue& NodeBuilder::MutableAttr(absl::string_view name) {
  AttrValue& value = (*node_->mutable_attr())[std::string(name)];
  value.Clear();
  return value;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name, int64_t value) {
  MutableAttr(name).set_i(value);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name, double value) {
  MutableAttr(name).set_f(value);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name, const char* value) {
  MutableAttr(name).set_s(value);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name,
                               const std::string& value) {
  MutableAttr(name).set_s(value);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name, bool value) {
  MutableAttr(name).set_b(value);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name,
                               std::vector<int64_t> values) {
  AttrValue& attr = MutableAttr(name);
  for (int64_t v : values) attr.add_ints(v);
  return *this;
}

NodeBuilder& NodeBuilder::Attr(absl::string_view name, DataType value) {
  MutableAttr(name).set_type(value);
  return *this;
}

NodeBuilder& NodeBuilder::Output(DataType dtype, std::vector<int64_t> shape) {
  TensorSpec* spec = node_->add_output();
  spec->set_dtype(dtype);
  for (int64_t d : shape) spec->add_shape(d);
  return *this;
}

NodeBuilder& NodeBuilder::Rank(int rank) {
  node_->set_rank(rank);
  return *this;
}

std::string NodeBuilder::out(int k) const {
  return absl::StrCat(node_->name(), ":", k);
}

GraphBuilder::GraphBuilder(std::string name) {
  graph_.set_name(std::move(name));
}

NodeBuilder GraphBuilder::Op(absl::string_view name, absl::string_view op,
                             std::vector<std::string> inputs) {
  NodeDef* node = graph_.add_node();
  node->set_name(std::string(name));
  node->set_op(std::string(op));
  node->set_rank(rank_);
  node->set_memory(memory_);
  for (std::string& input : inputs) node->add_input(std::move(input));
  return NodeBuilder(node);
}

std::string GraphBuilder::Placeholder(absl::string_view name, DataType dtype,
                                      std::vector<int64_t> shape) {
  return Op(name, "Placeholder").Output(dtype, std::move(shape)).out();
}

std::string GraphBuilder::Variable(absl::string_view name, DataType dtype,
                                   std::vector<int64_t> shape) {
  return Op(name, "Variable").Output(dtype, std::move(shape)).out();
}

}  // namespace rdmaflow::graph
