// File: model_source.cc
#include "cli/model_source.h"

#include <cstdint>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::cli {

absl::StatusOr<std::vector<graph::TensorSpec>> ParseInputSpecs(absl::string_view text) {
  std::vector<graph::TensorSpec> specs;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> typed = absl::StrSplit(part, absl::MaxSplits(':', 1));
    graph::DataType dtype = graph::DT_FLOAT32;
    if (typed.size() == 2) {
      static const std::pair<const char*, graph::DataType> kTypes[] = {
          {"float32", graph::DT_FLOAT32}, {"float64", graph::DT_FLOAT64},
          {"float16", graph::DT_FLOAT16}, {"bfloat16", graph::DT_BFLOAT16},
          {"int64", graph::DT_INT64},     {"int32", graph::DT_INT32},
          {"uint8", graph::DT_UINT8},     {"bool", graph::DT_BOOL}};
      bool known = false;
      for (const auto& [name, type] : kTypes) {
        if (typed[1] == name) {
          dtype = type;
          known = true;
        }
      }
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--input '", part, "': unknown dtype '", typed[1],
            "' (float32, float64, float16, bfloat16, int64, int32, uint8, bool)"));
      }
    }
    std::vector<int64_t> shape;
    for (absl::string_view d : absl::StrSplit(typed[0], 'x')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v < 1 || v > (int64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--input '", part, "': '", d, "' is not a dimension (sizes look like "
            "64x1x28x28, optionally with :int64)"));
      }
      shape.push_back(v);
    }
    specs.push_back(graph::MakeSpec(dtype, shape));
  }
  return specs;
}

bool IsTorchScriptFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 &&
         magic[3] == 4;
}

}  // namespace rdmaflow::cli
