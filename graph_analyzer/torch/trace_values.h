// File: trace_values.h
// -----------------------------------------------------------------------------
// What the two LibTorch importers (TorchScript, torch.export) share when they
// write a ModelTrace (graph_analyzer/model_trace.proto) from a run of the
// model: LibTorch's dtypes as the analyzer's, a tensor's spec, a constant
// argument as an attribute, and the one rewrite of a recorded op.
#ifndef RDMAFLOW_GRAPH_ANALYZER_TORCH_TRACE_VALUES_H_
#define RDMAFLOW_GRAPH_ANALYZER_TORCH_TRACE_VALUES_H_

#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"
#include "c10/core/ScalarType.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"

namespace rdmaflow::graph {

// kInvalidArgument naming the type for one the analyzer has no DataType of
// (complex, the float8s, ...).
absl::StatusOr<DataType> ToDataType(c10::ScalarType type);
absl::StatusOr<c10::ScalarType> ToScalarType(DataType type);

// The dtype and sizes of `t`.
absl::StatusOr<TensorSpec> SpecOf(const at::Tensor& t);

// A constant argument as an attribute: a bool, int, float, string or list of
// ints; a 0-d tensor (a number traced as a tensor) as its number. False for
// what has no attribute form (None, lists of floats, devices, ...).
bool ToAttr(const c10::IValue& v, AttrValue* attr);

// What LibTorch records as aten::_convolution (torch.jit.trace) or
// aten::convolution (core ATen) is, unless transposed, the convolution the
// module called: aten::conv<N>d, with N from the weight's rank
// (`weight_rank`), keeping stride, padding, dilation and groups.
void CanonicalizeConvolution(int weight_rank, TracedOp& op);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TORCH_TRACE_VALUES_H_
