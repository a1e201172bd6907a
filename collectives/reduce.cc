// File: reduce.cc
#include "collectives/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::collectives {
namespace {

template <typename T>
T Apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// One loop per operator so the compiler vectorizes each.
template <typename T>
void ReduceNative(ReduceOp op, T* __restrict dst, const T* __restrict src,
                  size_t count) {
  switch (op) {
    case ReduceOp::kSum:
      for (size_t i = 0; i < count; ++i) dst[i] += src[i];
      return;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < count; ++i) dst[i] *= src[i];
      return;
    case ReduceOp::kMin:
      for (size_t i = 0; i < count; ++i) dst[i] = std::min(dst[i], src[i]);
      return;
    case ReduceOp::kMax:
      for (size_t i = 0; i < count; ++i) dst[i] = std::max(dst[i], src[i]);
      return;
  }
}

// 16-bit floats: widen, reduce, round back.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void ReduceHalf(ReduceOp op, uint16_t* dst, const uint16_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Narrow(Apply(op, Widen(dst[i]), Widen(src[i])));
  }
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

}  // namespace

size_t ElementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 1;
}

std::string DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "?";
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::vector<std::string> DataTypeNames() {
  return {"float32", "float64", "float16", "bfloat16", "int32", "int64"};
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  if (name == "float32" || name == "fp32") return DataType::kFloat32;
  if (name == "float64" || name == "fp64") return DataType::kFloat64;
  if (name == "float16" || name == "fp16") return DataType::kFloat16;
  if (name == "bfloat16" || name == "bf16") return DataType::kBFloat16;
  if (name == "int32") return DataType::kInt32;
  if (name == "int64") return DataType::kInt64;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type '", name,
                   "'; types: ", absl::StrJoin(DataTypeNames(), ", ")));
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "product" || name == "prod") return ReduceOp::kProduct;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduce operator '", name, "'; operators: sum, product, min, max"));
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits = Bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float BFloat16ToFloat(uint16_t value) {
  return FromBits(static_cast<uint32_t>(value) << 16);
}

uint16_t FloatToHalf(float value) {
  const _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}

float HalfToFloat(uint16_t value) {
  _Float16 half;
  std::memcpy(&half, &value, 2);
  return static_cast<float>(half);
}

void Reduce(DataType type, ReduceOp op, void* dst, const void* src,
            size_t count) {
  switch (type) {
    case DataType::kFloat32:
      return ReduceNative(op, static_cast<float*>(dst),
                          static_cast<const float*>(src), count);
    case DataType::kFloat64:
      return ReduceNative(op, static_cast<double*>(dst),
                          static_cast<const double*>(src), count);
    case DataType::kInt32:
      return ReduceNative(op, static_cast<int32_t*>(dst),
                          static_cast<const int32_t*>(src), count);
    case DataType::kInt64:
      return ReduceNative(op, static_cast<int64_t*>(dst),
                          static_cast<const int64_t*>(src), count);
    case DataType::kFloat16:
      return ReduceHalf<HalfToFloat, FloatToHalf>(
          op, static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
          count);
    case DataType::kBFloat16:
      return ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(
          op, static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
          count);
  }
}

}  // namespace rdmaflow::collectives
