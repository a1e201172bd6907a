// File: internal/shape_fns_elementwise.cc
// Elementwise ops: unary (same spec as the input), binary with NumPy
// broadcasting, AddN, BiasAdd.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/internal/shape_fns.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph::internal {

Specs UnaryShape(const ShapeContext& c) {
  return std::vector<TensorSpec>{c.input(0)};
}

// Dimensions are aligned from the right; a known 1 stretches to the other
// side; an unknown dimension against a known d > 1 must be d at run time; an
// unknown against an unknown (or a 1) stays unknown.
Specs BroadcastShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  const auto& a = c.input(0).shape();
  const auto& b = c.input(1).shape();
  int rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (int i = 0; i < rank; ++i) {
    int ia = a.size() - rank + i;
    int ib = b.size() - rank + i;
    int64_t da = ia >= 0 ? a[ia] : 1;
    int64_t db = ib >= 0 ? b[ib] : 1;
    if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (DimsCompatible(da, db)) {
      out[i] = MergeDim(da, db);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", ShapeString(a), " and ", ShapeString(b),
          " do not broadcast (dimension ", i, ": ", da, " vs ", db, ")"));
    }
  }
  return std::vector<TensorSpec>{MakeSpec(c.input(0).dtype(), out)};
}

Specs AddNShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  TensorSpec out = c.input(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    const TensorSpec& in = c.input(i);
    bool same_rank = in.shape_size() == out.shape_size();
    for (int d = 0; same_rank && d < in.shape_size(); ++d) {
      if (!DimsCompatible(in.shape(d), out.shape(d))) same_rank = false;
    }
    if (!same_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AddN needs inputs of one shape: input 0 is ",
          SpecString(c.input(0)), ", input ", i, " (", c.node().input(i),
          ") is ", SpecString(in)));
    }
    for (int d = 0; d < in.shape_size(); ++d) {
      out.set_shape(d, MergeDim(out.shape(d), in.shape(d)));
    }
  }
  return std::vector<TensorSpec>{out};
}

// x [N, C, ...] + bias [C]: adds along dimension 1 (channels, NCHW).
Specs BiasAddShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  RETURN_IF_ERROR(CheckMinRank(c, 0, 2));
  RETURN_IF_ERROR(CheckRank(c, 1, 1));
  int64_t channels = c.input(0).shape(1);
  int64_t bias = c.input(1).shape(0);
  if (!DimsCompatible(channels, bias)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bias of ", bias, " elements does not match ", channels,
        " channels (dimension 1) of ", SpecString(c.input(0))));
  }
  TensorSpec out = c.input(0);
  out.set_shape(1, MergeDim(channels, bias));
  return std::vector<TensorSpec>{out};
}

}  // namespace rdmaflow::graph::internal
