// File: trace_values.cc
#include "graph_analyzer/torch/trace_values.h"

#include <cstdint>

#include "ATen/core/Tensor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {

absl::StatusOr<DataType> ToDataType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return DT_FLOAT32;
    case c10::ScalarType::Half: return DT_FLOAT16;
    case c10::ScalarType::BFloat16: return DT_BFLOAT16;
    case c10::ScalarType::Double: return DT_FLOAT64;
    case c10::ScalarType::Char: return DT_INT8;
    case c10::ScalarType::Byte: return DT_UINT8;
    case c10::ScalarType::Int: return DT_INT32;
    case c10::ScalarType::Long: return DT_INT64;
    case c10::ScalarType::Bool: return DT_BOOL;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensors of ", c10::toString(type), " are not supported"));
  }
}

absl::StatusOr<c10::ScalarType> ToScalarType(DataType type) {
  switch (type) {
    case DT_FLOAT32: return c10::ScalarType::Float;
    case DT_FLOAT16: return c10::ScalarType::Half;
    case DT_BFLOAT16: return c10::ScalarType::BFloat16;
    case DT_FLOAT64: return c10::ScalarType::Double;
    case DT_INT8: return c10::ScalarType::Char;
    case DT_UINT8: return c10::ScalarType::Byte;
    case DT_INT32: return c10::ScalarType::Int;
    case DT_INT64: return c10::ScalarType::Long;
    case DT_BOOL: return c10::ScalarType::Bool;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("an input of type ", DataTypeName(type), " cannot be made"));
  }
}

absl::StatusOr<TensorSpec> SpecOf(const at::Tensor& t) {
  ASSIGN_OR_RETURN(DataType dtype, ToDataType(t.scalar_type()));
  return MakeSpec(dtype, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
}

bool ToAttr(const c10::IValue& v, AttrValue* attr) {
  if (v.isTensor() && v.toTensor().dim() == 0) {  // a number traced as a tensor
    const at::Tensor& t = v.toTensor();
    if (t.is_floating_point()) {
      attr->set_f(t.item<double>());
    } else {
      attr->set_i(t.item<int64_t>());
    }
  } else if (v.isBool()) {
    attr->set_b(v.toBool());
  } else if (v.isInt()) {
    attr->set_i(v.toInt());
  } else if (v.isDouble()) {
    attr->set_f(v.toDouble());
  } else if (v.isString()) {
    attr->set_s(v.toStringRef());
  } else if (v.isIntList()) {
    for (int64_t x : v.toIntVector()) attr->add_ints(x);
  } else {
    return false;
  }
  return true;
}

void CanonicalizeConvolution(int weight_rank, TracedOp& op) {
  if (op.kind() != "aten::_convolution" && op.kind() != "aten::convolution") return;
  auto transposed = op.arg().find("transposed");
  if (transposed == op.arg().end() || transposed->second.b()) return;
  op.set_kind(absl::StrCat("aten::conv", weight_rank - 2, "d"));
  google::protobuf::Map<std::string, AttrValue> kept;
  for (const char* name : {"stride", "padding", "dilation", "groups"}) {
    if (auto it = op.arg().find(name); it != op.arg().end()) kept[name] = it->second;
  }
  *op.mutable_arg() = kept;
}

}  // namespace rdmaflow::graph
