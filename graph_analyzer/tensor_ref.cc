// File: tensor_ref.cc
#include "graph_analyzer/tensor_ref.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::graph {

std::string TensorRef::ToString() const { return absl::StrCat(node, ":", output); }

absl::StatusOr<TensorRef> ParseTensorRef(absl::string_view text) {
  TensorRef ref;
  size_t colon = text.rfind(':');
  absl::string_view node = text;
  if (colon != absl::string_view::npos) {
    node = text.substr(0, colon);
    absl::string_view index = text.substr(colon + 1);
    bool digits = !index.empty() && index.size() <= 9;
    for (char c : index) digits = digits && absl::ascii_isdigit(c);
    if (!digits || !absl::SimpleAtoi(index, &ref.output)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed tensor reference '", text,
          "': expected 'node' or 'node:k' with k a non-negative integer"));
    }
  }
  if (node.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed tensor reference '", text, "': empty node name"));
  }
  ref.node = std::string(node);
  return ref;
}

}  // namespace rdmaflow::graph
