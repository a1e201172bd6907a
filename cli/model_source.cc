// File: model_source.cc
#include "cli/model_source.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::cli {

absl::StatusOr<std::vector<graph::TensorSpec>> ParseInputSpecs(absl::string_view text) {
  std::vector<graph::TensorSpec> specs;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<graph::TensorSpec> spec = graph::ParseSpecText(part);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--input ", spec.status().message()));
    }
    specs.push_back(*std::move(spec));
  }
  return specs;
}

bool IsTorchScriptFile(const std::string& path) {
  // Regular files only: opening a FIFO would block (ReadTextProto then
  // refuses what is not a regular file).
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 &&
         magic[3] == 4;
}

}  // namespace rdmaflow::cli
