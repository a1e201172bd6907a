// File: sample_spec.cc
#include "train/sample_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::train {

std::string SampleSpec::ToString() const {
  return absl::StrCat(absl::StrJoin(shape, "x"), int64 ? ":int64" : "");
}

absl::StatusOr<std::vector<int64_t>> ParseSampleShape(absl::string_view text, bool* int64) {
  absl::StatusOr<graph::TensorSpec> spec = graph::ParseSpecText(text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input ", spec.status().message(), " (one sample's shape, without the batch)"));
  }
  if (spec->dtype() != graph::DT_FLOAT32 && spec->dtype() != graph::DT_INT64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input '", text, "': samples are float32 (the default) or int64 (token ids)"));
  }
  if (spec->shape_size() > 8) {
    return absl::InvalidArgumentError(absl::StrCat("--input '", text, "': more than 8 dimensions"));
  }
  *int64 = spec->dtype() == graph::DT_INT64;
  return std::vector<int64_t>(spec->shape().begin(), spec->shape().end());
}

}  // namespace rdmaflow::train
