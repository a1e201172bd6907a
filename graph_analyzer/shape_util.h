// File: shape_util.h
// -----------------------------------------------------------------------------
// Helpers over `graph::TensorSpec`: element sizes, byte counts, printing, and
// the checks every shape function shares. A dimension of `kUnknownDim` (-1)
// is known only at run time.
#ifndef RDMAFLOW_GRAPH_ANALYZER_SHAPE_UTIL_H_
#define RDMAFLOW_GRAPH_ANALYZER_SHAPE_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

inline constexpr int64_t kUnknownDim = -1;
// No dimension may exceed this (2^40): keeps shape arithmetic (sums, padding)
// far from int64 overflow. Byte counts are checked separately.
inline constexpr int64_t kMaxDim = int64_t{1} << 40;

// Bytes per element; 0 for DT_INVALID or a value outside the enum.
int64_t DataTypeSize(DataType dtype);

// "float32", "int64", ...; "invalid" for DT_INVALID.
std::string DataTypeName(DataType dtype);

// "[32, -1, 128]"; "[]" for a scalar.
std::string ShapeString(absl::Span<const int64_t> shape);

// "float32[32, -1, 128]".
std::string SpecString(const TensorSpec& spec);

// True when no dimension is unknown.
bool IsFullyDefined(const TensorSpec& spec);

// "64x1x28x28" (float32) or "8x16:int64" (any DataTypeName): the sizes the
// CLIs take for a model's inputs. kInvalidArgument naming the bad part
// (a dimension that is no integer in 1..2^40, an unknown dtype, a byte
// count that overflows).
absl::StatusOr<TensorSpec> ParseSpecText(absl::string_view text);

// Elements of a fully defined shape; nullopt when a dimension is unknown or
// the count would overflow int64.
std::optional<int64_t> NumElements(absl::Span<const int64_t> shape);

// Bytes of a fully defined tensor; nullopt when a dimension is unknown or the
// size overflows.
std::optional<int64_t> NumBytes(const TensorSpec& spec);

// Checks the dtype is a known, valid one, every dimension is positive (at
// most kMaxDim) or -1, and the byte count fits in int64. Returns kInvalidArgument saying which dimension is bad.
absl::Status CheckSpec(const TensorSpec& spec);

// Two dimensions are compatible when equal or when either is unknown.
bool DimsCompatible(int64_t a, int64_t b);

// Merges two compatible dimensions: the known one wins.
int64_t MergeDim(int64_t a, int64_t b);

// Builds a spec.
TensorSpec MakeSpec(DataType dtype, std::vector<int64_t> shape);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_SHAPE_UTIL_H_
