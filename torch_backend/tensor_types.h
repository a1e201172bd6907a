// File: tensor_types.h
// -----------------------------------------------------------------------------
// What the rdmaflow c10d backend accepts of LibTorch's tensors and reduce
// operators, and how they map onto the collectives' DataType and ReduceOp.
// Each refusal says what is supported.
#ifndef RDMAFLOW_TORCH_BACKEND_TENSOR_TYPES_H_
#define RDMAFLOW_TORCH_BACKEND_TENSOR_TYPES_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/reduce.h"

namespace rdmaflow::torch_backend {

// float32, float64, float16, bfloat16, int32, int64; kInvalidArgument for
// the others (they can still be broadcast, gathered and sent).
absl::StatusOr<collectives::DataType> ReducibleType(at::ScalarType type);

// SUM, PRODUCT, MIN, MAX; AVG as SUM then a division by the world size
// (floating point only). kInvalidArgument for the bitwise operators and
// PREMUL_SUM.
struct Reduction {
  collectives::ReduceOp op;
  bool average = false;
};
absl::StatusOr<Reduction> ToReduction(const c10d::ReduceOp& op, at::ScalarType type);

// A defined, dense (strided) CPU or CUDA tensor. kInvalidArgument naming
// `what` otherwise.
absl::Status CheckDenseTensor(const at::Tensor& tensor, absl::string_view what);

// Exactly one tensor in a c10d tensor list (one per device; a group has
// one).
absl::Status CheckSingle(const std::vector<at::Tensor>& tensors, absl::string_view what);

// The same dtype and number of elements as `like`.
absl::Status CheckSameShape(const at::Tensor& tensor, const at::Tensor& like,
                            absl::string_view what);

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_TENSOR_TYPES_H_
