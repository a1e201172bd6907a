// File: text_io.h
// -----------------------------------------------------------------------------
// Reading and writing the analyzer's protos in protobuf text format: graphs,
// plans and size traces. Parse errors carry the source name, line and column
// ("mlp.pbtxt:12:7: Expected identifier, got: }").
#ifndef RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_
#define RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace rdmaflow::graph {

// Parses `text` into `message` (cleared first). `source` names the input in
// errors. Returns kInvalidArgument with "source:line:column: problem" for
// every error the parser reports (at most 10 lines).
absl::Status ParseTextProto(absl::string_view text, absl::string_view source,
                            google::protobuf::Message* message);

// Reads and parses a file. kNotFound when it cannot be opened.
absl::Status ReadTextProto(const std::string& path,
                           google::protobuf::Message* message);

// Text format of `message`.
std::string ToTextProto(const google::protobuf::Message& message);

// Writes `message` to `path` in text format, with a leading comment line
// (`header`, may be empty). kPermissionDenied / kInternal on I/O errors.
absl::Status WriteTextProto(const std::string& path,
                            const google::protobuf::Message& message,
                            absl::string_view header = "");

// Reads a whole file. kNotFound when it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path`, replacing it.
absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_
