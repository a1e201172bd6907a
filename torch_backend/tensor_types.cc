#include "torch_backend/tensor_types.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::torch_backend {

absl::StatusOr<collectives::DataType> ReducibleType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return collectives::DataType::kFloat32;
    case at::kDouble:
      return collectives::DataType::kFloat64;
    case at::kHalf:
      return collectives::DataType::kFloat16;
    case at::kBFloat16:
      return collectives::DataType::kBFloat16;
    case at::kInt:
      return collectives::DataType::kInt32;
    case at::kLong:
      return collectives::DataType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "rdmaflow reduces float32, float64, float16, bfloat16, int32 and "
          "int64 tensors, not ", c10::toString(type)));
  }
}

absl::StatusOr<Reduction> ToReduction(const c10d::ReduceOp& op, at::ScalarType type) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return Reduction{collectives::ReduceOp::kSum};
    case c10d::ReduceOp::PRODUCT:
      return Reduction{collectives::ReduceOp::kProduct};
    case c10d::ReduceOp::MIN:
      return Reduction{collectives::ReduceOp::kMin};
    case c10d::ReduceOp::MAX:
      return Reduction{collectives::ReduceOp::kMax};
    case c10d::ReduceOp::AVG:
      if (!at::isFloatingType(type)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ReduceOp.AVG needs a floating-point tensor, not ", c10::toString(type),
            "; use SUM and divide"));
      }
      return Reduction{collectives::ReduceOp::kSum, /*average=*/true};
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "rdmaflow does not support reduce op ", static_cast<int>(op.op_),
          " (BAND, BOR, BXOR, PREMUL_SUM); it supports SUM, AVG, PRODUCT, MIN "
          "and MAX"));
  }
}

absl::Status CheckDenseTensor(const at::Tensor& tensor, absl::string_view what) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the tensor is undefined"));
  }
  if (!(tensor.device().is_cpu() || tensor.is_cuda()) || tensor.layout() != at::kStrided) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rdmaflow moves dense CPU and CUDA tensors; got one on ",
        tensor.device().str(), " with layout ", c10::toString(tensor.layout())));
  }
  return absl::OkStatus();
}

absl::Status CheckSingle(const std::vector<at::Tensor>& tensors, absl::string_view what) {
  if (tensors.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rdmaflow takes exactly one tensor per call (one device per group), got ",
        tensors.size()));
  }
  return CheckDenseTensor(tensors[0], what);
}

absl::Status CheckSameShape(const at::Tensor& tensor, const at::Tensor& like,
                            absl::string_view what) {
  if (tensor.scalar_type() != like.scalar_type() || tensor.numel() != like.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a ", c10::toString(tensor.scalar_type()), " tensor of ",
        tensor.numel(), " elements where the input is ",
        c10::toString(like.scalar_type()), " of ", like.numel()));
  }
  return CheckDenseTensor(tensor, what);
}

}  // namespace rdmaflow::torch_backend
