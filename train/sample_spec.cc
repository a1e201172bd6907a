// File: sample_spec.cc
#include "train/sample_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::train {

std::string SampleSpec::ToString() const {
  return absl::StrCat(absl::StrJoin(shape, "x"), int64 ? ":int64" : "");
}

absl::StatusOr<std::vector<int64_t>> ParseSampleShape(absl::string_view text, bool* int64) {
  std::vector<absl::string_view> typed = absl::StrSplit(text, absl::MaxSplits(':', 1));
  *int64 = false;
  if (typed.size() == 2) {
    if (typed[1] != "int64" && typed[1] != "float32") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input '", text, "': the type is float32 (the default) or int64 (token ids), "
          "not '", typed[1], "'"));
    }
    *int64 = typed[1] == "int64";
  }
  std::vector<int64_t> shape;
  for (absl::string_view d : absl::StrSplit(typed[0], 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 1 || v > 65536) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input '", text, "': '", d, "' is not a dimension in 1..65536 (one "
          "sample's shape, without the batch: 1x28x28, 3x32x32 or 16:int64)"));
    }
    shape.push_back(v);
  }
  if (shape.size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input '", text, "': more than 8 dimensions"));
  }
  return shape;
}

}  // namespace rdmaflow::train
