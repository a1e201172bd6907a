// File: internal/shape_fns_training.cc
// Training ops: a generic gradient and the parameter update.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/internal/shape_fns.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph::internal {

// Gradient: the first `wrt` inputs (attribute, default 1) are the forward
// tensors being differentiated; the rest (upstream gradients, saved
// activations) only order the computation. Output k has the spec of input k.
Specs GradientShape(const ShapeContext& c) {
  ASSIGN_OR_RETURN(int64_t wrt, c.GetIntOr("wrt", 1));
  if (wrt < 1 || wrt > c.num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'wrt' (", wrt, ") must be in 1 .. ", c.num_inputs(),
        " (the number of inputs)"));
  }
  std::vector<TensorSpec> outs;
  for (int i = 0; i < wrt; ++i) outs.push_back(c.input(i));
  return outs;
}

// ApplyGradient(param, grad, ...): the updated parameter; `grad` must have the
// parameter's spec. Further inputs (optimizer state) are not checked.
Specs ApplyGradientShape(const ShapeContext& c) {
  const TensorSpec& param = c.input(0);
  const TensorSpec& grad = c.input(1);
  bool same = param.dtype() == grad.dtype() &&
              param.shape_size() == grad.shape_size();
  for (int d = 0; same && d < param.shape_size(); ++d) {
    same = DimsCompatible(param.shape(d), grad.shape(d));
  }
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient ", c.node().input(1), " ", SpecString(grad),
        " does not match parameter ", c.node().input(0), " ",
        SpecString(param)));
  }
  return std::vector<TensorSpec>{param};
}

}  // namespace rdmaflow::graph::internal
