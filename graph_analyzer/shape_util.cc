// File: shape_util.cc
#include "graph_analyzer/shape_util.h"

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::graph {

int64_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT32:
    case DT_INT32:
      return 4;
    case DT_FLOAT16:
    case DT_BFLOAT16:
      return 2;
    case DT_FLOAT64:
    case DT_INT64:
      return 8;
    case DT_INT8:
    case DT_UINT8:
    case DT_BOOL:
      return 1;
    default:
      return 0;
  }
}

std::string DataTypeName(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT32:
      return "float32";
    case DT_FLOAT16:
      return "float16";
    case DT_BFLOAT16:
      return "bfloat16";
    case DT_FLOAT64:
      return "float64";
    case DT_INT8:
      return "int8";
    case DT_UINT8:
      return "uint8";
    case DT_INT32:
      return "int32";
    case DT_INT64:
      return "int64";
    case DT_BOOL:
      return "bool";
    default:
      return "invalid";
  }
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string SpecString(const TensorSpec& spec) {
  return absl::StrCat(DataTypeName(spec.dtype()), ShapeString(spec.shape()));
}

bool IsFullyDefined(const TensorSpec& spec) {
  for (int64_t d : spec.shape()) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

std::optional<int64_t> NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return std::nullopt;
    }
    n *= d;
  }
  return n;
}

std::optional<int64_t> NumBytes(const TensorSpec& spec) {
  std::optional<int64_t> n = NumElements(spec.shape());
  int64_t size = DataTypeSize(spec.dtype());
  if (!n.has_value() || size == 0) return std::nullopt;
  if (*n > std::numeric_limits<int64_t>::max() / size) return std::nullopt;
  return *n * size;
}

absl::Status CheckSpec(const TensorSpec& spec) {
  if (DataTypeSize(spec.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int>(spec.dtype()),
                     " (set dtype, e.g. DT_FLOAT32)"));
  }
  for (int i = 0; i < spec.shape_size(); ++i) {
    int64_t d = spec.shape(i);
    if (d == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", i, " of ", ShapeString(spec.shape()),
                       " is zero (empty tensors are not transferred)"));
    }
    if (d > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " of ", ShapeString(spec.shape()), " exceeds 2^40"));
    }
    if (d < 0 && d != kUnknownDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " of ", ShapeString(spec.shape()), " is negative (",
          d, "); use -1 for a dimension known only at run time"));
    }
  }
  if (IsFullyDefined(spec) && !NumBytes(spec).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeString(spec.shape()), " overflows a 64-bit byte count"));
  }
  return absl::OkStatus();
}

bool DimsCompatible(int64_t a, int64_t b) {
  return a == b || a == kUnknownDim || b == kUnknownDim;
}

int64_t MergeDim(int64_t a, int64_t b) { return a == kUnknownDim ? b : a; }

TensorSpec MakeSpec(DataType dtype, std::vector<int64_t> shape) {
  TensorSpec spec;
  spec.set_dtype(dtype);
  for (int64_t d : shape) spec.add_shape(d);
  return spec;
}

absl::StatusOr<TensorSpec> ParseSpecText(absl::string_view text) {
  std::vector<absl::string_view> typed = absl::StrSplit(text, absl::MaxSplits(':', 1));
  DataType dtype = DT_FLOAT32;
  if (typed.size() == 2) {
    bool known = false;
    for (int t = DT_FLOAT32; t <= DT_BOOL; ++t) {
      if (DataTypeName(static_cast<DataType>(t)) == typed[1]) {
        dtype = static_cast<DataType>(t);
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': unknown dtype '", typed[1],
          "' (float32, float16, bfloat16, float64, int8, uint8, int32, int64, bool)"));
    }
  }
  std::vector<int64_t> shape;
  for (absl::string_view d : absl::StrSplit(typed[0], 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 1 || v > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': '", d, "' is not a dimension in 1..2^40 (sizes look like "
          "64x1x28x28, or 8x16:int64)"));
    }
    shape.push_back(v);
  }
  TensorSpec spec = MakeSpec(dtype, std::move(shape));
  if (absl::Status valid = CheckSpec(spec); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': ", valid.message()));
  }
  return spec;
}

}  // namespace rdmaflow::graph
