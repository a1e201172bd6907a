// File: internal/shape_fns_common.cc
// Checks shared by the shape functions, and the ops whose outputs are
// declared rather than derived (sources, Recv) or absent (Send).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/internal/shape_fns.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph::internal {

absl::Status CheckSameDtype(const ShapeContext& c) {
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (c.input(i).dtype() != c.input(0).dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype mismatch: input 0 is ", SpecString(c.input(0)), ", input ", i,
          " (", c.node().input(i), ") is ", SpecString(c.input(i))));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRank(const ShapeContext& c, int input, int rank) {
  if (c.input(input).shape_size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", input, " (", c.node().input(input), ") must have rank ", rank,
        ", got ", SpecString(c.input(input))));
  }
  return absl::OkStatus();
}

absl::Status CheckMinRank(const ShapeContext& c, int input, int rank) {
  if (c.input(input).shape_size() < rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", input, " (", c.node().input(input),
        ") must have rank >= ", rank, ", got ", SpecString(c.input(input))));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axis ", axis, " is out of range for rank ", rank, " (valid: ", -rank,
        " .. ", rank - 1, ")"));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Specs DeclaredOutputs(const ShapeContext& c) {
  if (c.node().output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", c.node().op(), " must declare exactly one output (dtype and "
        "shape), got ", c.node().output_size()));
  }
  return std::vector<TensorSpec>{c.node().output(0)};
}

Specs NoOutputs(const ShapeContext&) { return std::vector<TensorSpec>{}; }

// Opaque: an op of an imported graph the analyzer has no shape function for
// (attribute `op` names it, e.g. "aten::layer_norm"), carried with the
// outputs its importer traced.
Specs OpaqueOutputs(const ShapeContext& c) {
  ASSIGN_OR_RETURN(std::string op, c.GetString("op"));
  if (op.empty()) {
    return absl::InvalidArgumentError("attribute 'op' (the imported op's name) is empty");
  }
  if (c.node().output_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an Opaque op (", op, ") must declare its outputs (dtype and shape)"));
  }
  return std::vector<TensorSpec>(c.node().output().begin(), c.node().output().end());
}

}  // namespace rdmaflow::graph::internal
