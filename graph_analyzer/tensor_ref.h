// File: tensor_ref.h
// -----------------------------------------------------------------------------
// TensorRef: a node output named "node" (output 0) or "node:k".
#ifndef RDMAFLOW_GRAPH_ANALYZER_TENSOR_REF_H_
#define RDMAFLOW_GRAPH_ANALYZER_TENSOR_REF_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::graph {

// A value type. Thread-compatible.
struct TensorRef {
  std::string node;
  int output = 0;

  // "node:k", always with the index: the canonical name plans use.
  std::string ToString() const;

  friend bool operator==(const TensorRef& a, const TensorRef& b) {
    return a.node == b.node && a.output == b.output;
  }
};

// Parses "node" or "node:k" (k a non-negative decimal). Returns
// kInvalidArgument for an empty node name or a malformed index.
absl::StatusOr<TensorRef> ParseTensorRef(absl::string_view text);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TENSOR_REF_H_
