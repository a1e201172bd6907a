// File: internal/shape_fns_nn.cc
// Neural-network ops: MatMul, Conv2D and pooling (NCHW), cross-entropy loss.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/internal/shape_fns.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph::internal {
namespace {

// Spatial attributes shared by Conv2D and pooling: window, strides and
// padding ("VALID", "SAME", or explicit symmetric `pads` [ph, pw]).
struct Window {
  int64_t kernel[2];
  int64_t stride[2];
  int64_t pad[2];
  bool same;
};

absl::StatusOr<std::vector<int64_t>> PairAttr(const ShapeContext& c,
                                              absl::string_view name,
                                              std::vector<int64_t> fallback) {
  ASSIGN_OR_RETURN(std::vector<int64_t> v, c.GetIntsOr(name, fallback));
  if (v.size() != 2 || v[0] < 0 || v[1] < 0 || v[0] > kMaxDim ||
      v[1] > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute '", name, "' must be two ints in 0 .. 2^40 [h, w], got ",
        ShapeString(v)));
  }
  return v;
}

absl::StatusOr<Window> ReadWindow(const ShapeContext& c, int64_t kh,
                                  int64_t kw) {
  Window w{};
  w.kernel[0] = kh;
  w.kernel[1] = kw;
  ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                   PairAttr(c, "strides", {1, 1}));
  if (strides[0] == 0 || strides[1] == 0) {
    return absl::InvalidArgumentError("attribute 'strides' must be positive");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, PairAttr(c, "pads", {0, 0}));
  ASSIGN_OR_RETURN(std::string padding, c.GetStringOr("padding", "VALID"));
  if (padding != "VALID" && padding != "SAME") {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'padding' must be \"VALID\" or \"SAME\", got \"", padding,
        "\""));
  }
  w.same = padding == "SAME";
  if (w.same && c.HasAttr("pads")) {
    return absl::InvalidArgumentError(
        "attributes 'pads' and padding \"SAME\" are exclusive");
  }
  for (int i = 0; i < 2; ++i) {
    w.stride[i] = strides[i];
    w.pad[i] = pads[i];
  }
  return w;
}

// Output extent of one spatial dimension; unknown stays unknown.
absl::StatusOr<int64_t> WindowExtent(const Window& w, int i, int64_t in) {
  if (in == kUnknownDim) return kUnknownDim;
  if (w.same) return (in + w.stride[i] - 1) / w.stride[i];
  int64_t padded = in + 2 * w.pad[i];
  if (padded < w.kernel[i]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window of ", w.kernel[i], " does not fit spatial dimension ", i,
        " of size ", in, " (padded: ", padded, ")"));
  }
  return (padded - w.kernel[i]) / w.stride[i] + 1;
}

// [N, channels, H', W'] from input 0 [N, C, H, W] through the window.
Specs SpatialOutput(const ShapeContext& c, const Window& w, int64_t channels) {
  const auto& x = c.input(0).shape();
  ASSIGN_OR_RETURN(int64_t h, WindowExtent(w, 0, x[2]));
  ASSIGN_OR_RETURN(int64_t wd, WindowExtent(w, 1, x[3]));
  return std::vector<TensorSpec>{
      MakeSpec(c.input(0).dtype(), {x[0], channels, h, wd})};
}

}  // namespace

// a [..., m, k] x b [k, n] -> [..., m, n]; with rank-2 `a`, the bool
// attributes transpose_a / transpose_b transpose the operands first.
Specs MatMulShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  RETURN_IF_ERROR(CheckMinRank(c, 0, 2));
  RETURN_IF_ERROR(CheckRank(c, 1, 2));
  ASSIGN_OR_RETURN(bool ta, c.GetBoolOr("transpose_a", false));
  ASSIGN_OR_RETURN(bool tb, c.GetBoolOr("transpose_b", false));
  const auto& a = c.input(0).shape();
  const auto& b = c.input(1).shape();
  if (ta && a.size() != 2) {
    return absl::InvalidArgumentError(
        "transpose_a needs a rank-2 left operand");
  }
  int rank = a.size();
  int64_t m = ta ? a[1] : a[rank - 2];
  int64_t ka = ta ? a[0] : a[rank - 1];
  int64_t kb = tb ? b[1] : b[0];
  int64_t n = tb ? b[0] : b[1];
  if (!DimsCompatible(ka, kb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner dimensions differ: ", SpecString(c.input(0)),
        ta ? " (transposed)" : "", " x ", SpecString(c.input(1)),
        tb ? " (transposed)" : "", ": ", ka, " vs ", kb));
  }
  std::vector<int64_t> out(a.begin(), a.end() - 2);
  out.push_back(m);
  out.push_back(n);
  return std::vector<TensorSpec>{MakeSpec(c.input(0).dtype(), out)};
}

// input [N, C, H, W] * filter [O, C, KH, KW] -> [N, O, H', W'].
Specs Conv2DShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckSameDtype(c));
  RETURN_IF_ERROR(CheckRank(c, 0, 4));
  RETURN_IF_ERROR(CheckRank(c, 1, 4));
  const auto& x = c.input(0).shape();
  const auto& f = c.input(1).shape();
  if (!DimsCompatible(x[1], f[1])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input channels differ: input ", SpecString(c.input(0)),
        " has ", x[1], " (dimension 1), filter ", SpecString(c.input(1)),
        " expects ", f[1]));
  }
  if (f[2] == kUnknownDim || f[3] == kUnknownDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "filter ", SpecString(c.input(1)), " needs a known kernel size"));
  }
  ASSIGN_OR_RETURN(Window w, ReadWindow(c, f[2], f[3]));
  return SpatialOutput(c, w, f[0]);
}

// input [N, C, H, W], attribute ksize [kh, kw] (strides default to ksize).
Specs PoolShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckRank(c, 0, 4));
  ASSIGN_OR_RETURN(std::vector<int64_t> ksize, c.GetInts("ksize"));
  if (ksize.size() != 2 || ksize[0] <= 0 || ksize[1] <= 0 ||
      ksize[0] > kMaxDim || ksize[1] > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'ksize' must be two positive ints [kh, kw], got ",
        ShapeString(ksize)));
  }
  ASSIGN_OR_RETURN(Window w, ReadWindow(c, ksize[0], ksize[1]));
  if (!c.HasAttr("strides")) {
    w.stride[0] = ksize[0];
    w.stride[1] = ksize[1];
  }
  return SpatialOutput(c, w, c.input(0).shape(1));
}

// logits [N, C], labels [N] (class indices, an integer dtype) or [N, C]
// (probabilities, the logits' dtype) -> the mean loss, a scalar.
Specs CrossEntropyShape(const ShapeContext& c) {
  RETURN_IF_ERROR(CheckRank(c, 0, 2));
  const TensorSpec& logits = c.input(0);
  const TensorSpec& labels = c.input(1);
  bool indices = labels.shape_size() == 1;
  if (indices) {
    if (labels.dtype() != DT_INT32 && labels.dtype() != DT_INT64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank-1 labels are class indices and must be int32 or int64, got ",
          SpecString(labels)));
    }
  } else {
    RETURN_IF_ERROR(CheckRank(c, 1, 2));
    RETURN_IF_ERROR(CheckSameDtype(c));
    if (!DimsCompatible(logits.shape(1), labels.shape(1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("class counts differ: logits ", SpecString(logits),
                       ", labels ", SpecString(labels)));
    }
  }
  if (!DimsCompatible(logits.shape(0), labels.shape(0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sizes differ: logits ", SpecString(logits),
                     ", labels ", SpecString(labels)));
  }
  return std::vector<TensorSpec>{MakeSpec(logits.dtype(), {})};
}

}  // namespace rdmaflow::graph::internal
