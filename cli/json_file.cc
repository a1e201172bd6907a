// File: json_file.cc
#include "cli/json_file.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/text_io.h"
#include "results/json.h"

namespace rdmaflow::cli {

absl::Status ReadJsonFile(const std::string& path, google::protobuf::Message* message) {
  ASSIGN_OR_RETURN(std::string text, graph::ReadFileToString(path));
  absl::Status parsed = results::FromJson(text, message);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a ", message->GetDescriptor()->full_name(), " in JSON: ",
        parsed.message()));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::cli
