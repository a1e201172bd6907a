// File: internal/shape_fns.h
// -----------------------------------------------------------------------------
// The shape functions behind op_registry.cc, grouped by family in
// shape_fns_*.cc, plus the helpers they share. Not part of the API.
#ifndef RDMAFLOW_GRAPH_ANALYZER_INTERNAL_SHAPE_FNS_H_
#define RDMAFLOW_GRAPH_ANALYZER_INTERNAL_SHAPE_FNS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph_analyzer/op_registry.h"

namespace rdmaflow::graph::internal {

using Specs = absl::StatusOr<std::vector<TensorSpec>>;

// Shared checks.
absl::Status CheckSameDtype(const ShapeContext& c);
absl::Status CheckRank(const ShapeContext& c, int input, int rank);
absl::Status CheckMinRank(const ShapeContext& c, int input, int rank);
// Normalizes a possibly negative axis against `rank`.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

// shape_fns_source.cc: Placeholder, Variable, Parameter, Const, Recv.
Specs DeclaredOutputs(const ShapeContext& c);
// Send: no outputs.
Specs NoOutputs(const ShapeContext& c);
// Opaque: the declared outputs (one or more); attribute `op` required.
Specs OpaqueOutputs(const ShapeContext& c);

// shape_fns_elementwise.cc
Specs UnaryShape(const ShapeContext& c);     // Relu, Sigmoid, Tanh, Identity,
                                             // Softmax
Specs BroadcastShape(const ShapeContext& c);  // Add, Sub, Mul
Specs AddNShape(const ShapeContext& c);
Specs BiasAddShape(const ShapeContext& c);

// shape_fns_nn.cc
Specs MatMulShape(const ShapeContext& c);
Specs Conv2DShape(const ShapeContext& c);
Specs PoolShape(const ShapeContext& c);  // MaxPool, AvgPool
Specs CrossEntropyShape(const ShapeContext& c);

// shape_fns_array.cc
Specs ReshapeShape(const ShapeContext& c);
Specs FlattenShape(const ShapeContext& c);
Specs ConcatShape(const ShapeContext& c);
Specs SplitShape(const ShapeContext& c);
Specs ReduceShape(const ShapeContext& c);  // ReduceSum, ReduceMean

// shape_fns_training.cc
Specs GradientShape(const ShapeContext& c);
Specs ApplyGradientShape(const ShapeContext& c);

}  // namespace rdmaflow::graph::internal

#endif  // RDMAFLOW_GRAPH_ANALYZER_INTERNAL_SHAPE_FNS_H_
