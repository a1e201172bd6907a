// File: json_file.h
// -----------------------------------------------------------------------------
// ReadJsonFile: a result record or simulator file (results/json.h's schema)
// read from disk, size-capped, with the path in every error.
#ifndef RDMAFLOW_CLI_JSON_FILE_H_
#define RDMAFLOW_CLI_JSON_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace rdmaflow::cli {

// kNotFound/kPermissionDenied/kInvalidArgument/kResourceExhausted naming
// `path` (graph/text_io.h's ReadFileToString), or kInvalidArgument naming
// it when the JSON does not parse as `message`'s type.
absl::Status ReadJsonFile(const std::string& path, google::protobuf::Message* message);

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_JSON_FILE_H_
