// File: op_registry.h
// -----------------------------------------------------------------------------
// The ops the analyzer understands: for each, how many inputs it takes and a
// shape function that derives its outputs' specs from its inputs' specs and
// attributes, propagating unknown (-1) dimensions. The table is fixed at
// compile time (no self-registration); docs/graph_analyzer.md lists every op
// with its attributes.
#ifndef RDMAFLOW_GRAPH_ANALYZER_OP_REGISTRY_H_
#define RDMAFLOW_GRAPH_ANALYZER_OP_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

// What a shape function sees of one node: its definition and the specs of
// its inputs, plus typed attribute accessors whose errors name the attribute.
// Thread-compatible; borrows everything it is given.
class ShapeContext {
 public:
  ShapeContext(const NodeDef& node, std::vector<const TensorSpec*> inputs)
      : node_(node), inputs_(std::move(inputs)) {}

  const NodeDef& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorSpec& input(int i) const { return *inputs_[i]; }

  // Required attributes: kInvalidArgument when missing or of another type.
  absl::StatusOr<int64_t> GetInt(absl::string_view name) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name) const;
  absl::StatusOr<std::string> GetString(absl::string_view name) const;
  // Optional attributes: `fallback` when absent, an error when present with
  // another type.
  absl::StatusOr<int64_t> GetIntOr(absl::string_view name,
                                   int64_t fallback) const;
  absl::StatusOr<std::vector<int64_t>> GetIntsOr(
      absl::string_view name, std::vector<int64_t> fallback) const;
  absl::StatusOr<std::string> GetStringOr(absl::string_view name,
                                          std::string fallback) const;
  absl::StatusOr<bool> GetBoolOr(absl::string_view name, bool fallback) const;
  bool HasAttr(absl::string_view name) const;

 private:
  const AttrValue* Find(absl::string_view name) const;

  const NodeDef& node_;
  std::vector<const TensorSpec*> inputs_;
};

// Returns the specs of the node's outputs, or kInvalidArgument saying what
// about the inputs or attributes is wrong (the caller adds the node's name).
using ShapeFn = absl::StatusOr<std::vector<TensorSpec>> (*)(
    const ShapeContext& context);

struct OpDef {
  absl::string_view name;
  int min_inputs;
  int max_inputs;  // kVariadic: no limit.
  ShapeFn shape_fn;
};

inline constexpr int kVariadic = -1;

// The op called `name`, or nullptr.
const OpDef* FindOp(absl::string_view name);

// Every op name, sorted.
std::vector<absl::string_view> KnownOps();

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_OP_REGISTRY_H_
