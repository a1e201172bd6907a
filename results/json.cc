// File: json.cc
#include "results/json.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace rdmaflow::results {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   JsonLayout layout) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = layout == JsonLayout::kIndented;
  // Readers index fields without checking for them: a zero is printed.
  options.always_print_primitive_fields = true;
  // Consumers expect the snake_case names, not protobuf's lowerCamelCase.
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot print a ",
                                            message.GetTypeName(),
                                            " as JSON: ", status.ToString()));
  }
  // The indented form already ends with a newline; the one-line form not.
  if (json.empty() || json.back() != '\n') json += '\n';
  return json;
}

absl::Status WriteJsonFile(const google::protobuf::Message& message,
                           const std::string& path, JsonLayout layout) {
  absl::StatusOr<std::string> json = ToJson(message, layout);
  if (!json.ok()) return json.status();
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << *json;
  file.close();
  if (!file) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", message.GetTypeName(), " to '", path,
                     "': does the directory exist and is it writable?"));
  }
  return absl::OkStatus();
}

absl::Status FromJson(absl::string_view json,
                      google::protobuf::Message* message) {
  message->Clear();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message,
      options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a ", message->GetTypeName(), " in JSON: ", status.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::results
