// File: json.h
// -----------------------------------------------------------------------------
// Result records as JSON through protobuf's JSON printer and parser, so no
// tool concatenates JSON by hand. Every message is printed the same way:
// proto field names (snake_case), every field including zeros and empty
// lists, enums by name. results.proto says which types print as JSON
// numbers.
#ifndef RDMAFLOW_RESULTS_JSON_H_
#define RDMAFLOW_RESULTS_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace rdmaflow::results {

enum class JsonLayout {
  kIndented,  // One field a line, indented; ends with a newline.
  kOneLine,   // No whitespace at all; ends with a newline (JSON Lines).
};

// `message` as JSON. kInternal if protobuf cannot print it (it prints every
// message of this package; the message says which type failed).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   JsonLayout layout = JsonLayout::kIndented);

// Writes ToJson(message, layout) to `path`, replacing the file.
// kUnavailable naming the path if it cannot be written.
absl::Status WriteJsonFile(const google::protobuf::Message& message,
                           const std::string& path,
                           JsonLayout layout = JsonLayout::kIndented);

// Parses `json` into `message` (cleared first). Unknown fields are an error,
// so a reader notices a record of another schema. kInvalidArgument with
// protobuf's reason otherwise.
absl::Status FromJson(absl::string_view json,
                      google::protobuf::Message* message);

}  // namespace rdmaflow::results

#endif  // RDMAFLOW_RESULTS_JSON_H_
