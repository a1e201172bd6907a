// File: reduce.h
// -----------------------------------------------------------------------------
// Element types and reduction operators of the collectives, the
// elementwise kernel they all use, dst[i] = op(dst[i], src[i]), and the
// fold of several sources into one result built on it (ReduceMany).
// float16 and bfloat16 are reduced in float32 and rounded back (to nearest,
// ties to even), as LibTorch does on CPU.
#ifndef RDMAFLOW_COLLECTIVES_REDUCE_H_
#define RDMAFLOW_COLLECTIVES_REDUCE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rdmaflow::collectives {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kProduct, kMin, kMax };

// Bytes per element.
size_t ElementSize(DataType type);
// "float32", "sum", ...
std::string DataTypeName(DataType type);
std::string ReduceOpName(ReduceOp op);
// Inverse of the names above (also "fp32", "fp16", "bf16", "prod");
// kInvalidArgument listing the accepted names.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);
std::vector<std::string> DataTypeNames();

// dst[i] = op(dst[i], src[i]) for i < count. dst and src may not overlap.
// Every (type, op) pair is supported.
void Reduce(DataType type, ReduceOp op, void* dst, const void* src,
            size_t count);

// dst[i] = op(...op(op(srcs[0][i], srcs[1][i]), srcs[2][i])..., srcs[n-1][i])
// for i < count: the sources folded in their order, as Reduce() on a copy
// of srcs[0], source after source, would (the same bits), but a block of
// 4 KiB at a time, so that the partial result stays in the core's nearest
// cache while every source is added to it instead of being read and
// written once per source. `dst` may be srcs[0]; no other overlap. No
// sources: nothing is written.
void ReduceMany(DataType type, ReduceOp op, std::byte* dst,
                absl::Span<const std::byte* const> srcs, size_t count);

// float32 <-> float16 / bfloat16 (round to nearest even), for tests and
// callers that fill half-precision buffers.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t value);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t value);

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_REDUCE_H_
