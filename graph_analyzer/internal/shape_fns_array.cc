// File: internal/shape_fns_array.cc
// Ops that rearrange or reduce: Reshape, Flatten, Concat, Split, ReduceSum and
// ReduceMean.
#include <algorithm>
#include <optional>

#include "absl/types/span.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/internal/shape_fns.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph::internal {
namespace {

// Product of shape[begin, end); unknown if any factor is.
absl::StatusOr<int64_t> Product(const TensorSpec& spec, int begin, int end) {
  absl::Span<const int64_t> dims(spec.shape().data() + begin, end - begin);
  for (int64_t d : dims) {
    if (d == kUnknownDim) return kUnknownDim;
  }
  std::optional<int64_t> p = NumElements(dims);
  if (!p.has_value() || *p > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flattened dimension of ", SpecString(spec), " exceeds 2^40"));
  }
  return *p;
}

}  // namespace

// Attribute `shape`: the new shape, where at most one -1 means "whatever
// makes the element count match". With an input of unknown size that
// dimension stays unknown.
Specs ReshapeShape(const ShapeContext& c) {
  ASSIGN_OR_RETURN(std::vector<int64_t> target, c.GetInts("shape"));
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(target.size()); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attribute 'shape' ", ShapeString(target),
            " has more than one -1"));
      }
      infer = i;
    } else if (target[i] <= 0 || target[i] > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'shape' ", ShapeString(target),
                       " has a dimension that is not in 1 .. 2^40 (or -1)"));
    } else if (known > kMaxDim * 1024 / target[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'shape' ", ShapeString(target), " is too large"));
    } else {
      known *= target[i];
    }
  }
  std::optional<int64_t> elements = NumElements(c.input(0).shape());
  if (elements.has_value()) {
    bool fits = infer >= 0 ? *elements % known == 0 : *elements == known;
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot reshape ", SpecString(c.input(0)), " (", *elements,
          " elements) to ", ShapeString(target)));
    }
    if (infer >= 0) target[infer] = *elements / known;
  }
  return std::vector<TensorSpec>{MakeSpec(c.input(0).dtype(), target)};
}

// Attribute `axis` (default 1): [d0 .. d(axis-1)] x [d(axis) ..] collapse to
// two dimensions.
Specs FlattenShape(const ShapeContext& c) {
  const TensorSpec& in = c.input(0);
  ASSIGN_OR_RETURN(int64_t axis, c.GetIntOr("axis", 1));
  if (axis < 0 || axis > in.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axis ", axis, " is out of range for ", SpecString(in), " (0 .. ",
        in.shape_size(), ")"));
  }
  int rank = in.shape_size();
  ASSIGN_OR_RETURN(int64_t outer, Product(in, 0, axis));
  ASSIGN_OR_RETURN(int64_t inner, Product(in, axis, rank));
  return std::vector<TensorSpec>{MakeSpec(in.dtype(), {outer, inner})};
}

// Attribute `axis` (required, may be negative): inputs agree on every other
// dimension; the axis dimension is their sum.
Specs ConcatShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  ASSIGN_OR_RETURN(int64_t raw_axis, c.GetInt("axis"));
  TensorSpec out = c.input(0);
  int rank = out.shape_size();
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(raw_axis, rank));
  for (int i = 1; i < c.num_inputs(); ++i) {
    const TensorSpec& in = c.input(i);
    if (in.shape_size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks differ: input 0 is ", SpecString(c.input(0)), ", input ", i,
          " (", c.node().input(i), ") is ", SpecString(in)));
    }
    for (int d = 0; d < rank; ++d) {
      if (d == axis) {
        bool unknown = out.shape(d) == kUnknownDim || in.shape(d) == kUnknownDim;
        out.set_shape(d, unknown ? kUnknownDim : out.shape(d) + in.shape(d));
      } else if (!DimsCompatible(out.shape(d), in.shape(d))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dimension ", d, " differs: input 0 is ", SpecString(c.input(0)),
            ", input ", i, " (", c.node().input(i), ") is ", SpecString(in)));
      } else {
        out.set_shape(d, MergeDim(out.shape(d), in.shape(d)));
      }
    }
  }
  return std::vector<TensorSpec>{out};
}

// Attributes `axis` and either `num_split` (equal parts) or `sizes`.
Specs SplitShape(const ShapeContext& c) {
  const TensorSpec& in = c.input(0);
  ASSIGN_OR_RETURN(int64_t raw_axis, c.GetInt("axis"));
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(raw_axis, in.shape_size()));
  int64_t dim = in.shape(axis);
  std::vector<int64_t> sizes;
  if (c.HasAttr("sizes")) {
    ASSIGN_OR_RETURN(sizes, c.GetInts("sizes"));
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s <= 0 || s > kMaxDim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attribute 'sizes' ", ShapeString(sizes), " must be in 1 .. 2^40"));
      }
      sum += s;
    }
    if (sizes.empty() || (dim != kUnknownDim && sum != dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'sizes' ", ShapeString(sizes), " must sum to dimension ",
          axis, " of ", SpecString(in)));
    }
  } else {
    ASSIGN_OR_RETURN(int64_t n, c.GetInt("num_split"));
    if (n <= 0 || n > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'num_split' must be in 1 .. 4096, got ", n));
    }
    if (dim != kUnknownDim && dim % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", axis, " of ", SpecString(in), " does not split into ",
          n, " equal parts"));
    }
    sizes.assign(n, dim == kUnknownDim ? kUnknownDim : dim / n);
  }
  std::vector<TensorSpec> outs;
  for (int64_t s : sizes) {
    TensorSpec out = in;
    out.set_shape(axis, s);
    outs.push_back(out);
  }
  return outs;
}

// Attributes `axes` (default: all) and `keep_dims` (default false).
Specs ReduceShape(const ShapeContext& c) {
  const TensorSpec& in = c.input(0);
  int rank = in.shape_size();
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.GetIntsOr("axes", {}));
  ASSIGN_OR_RETURN(bool keep, c.GetBoolOr("keep_dims", false));
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t raw : axes) {
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(raw, rank));
    if (reduced[axis]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'axes' ", ShapeString(axes), " names axis ", axis,
          " twice"));
    }
    reduced[axis] = true;
  }
  std::vector<int64_t> out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.push_back(in.shape(d));
    } else if (keep) {
      out.push_back(1);
    }
  }
  return std::vector<TensorSpec>{MakeSpec(in.dtype(), out)};
}

}  // namespace rdmaflow::graph::internal
