// File: text_io.h
// -----------------------------------------------------------------------------
// Reading and writing the analyzer's protos in protobuf text format: graphs,
// plans and size traces. Parse errors carry the source name, line and column
// ("mlp.pbtxt:12:7: Expected identifier, got: }").
#ifndef RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_
#define RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_

#include <cstdint>
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

// Input files larger than this are refused unless the caller raises the
// limit: 64 MiB of text is a graph of about half a million nodes, and the
// parsed protos take several times the text's size in memory.
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t{64} << 20;

// Reads and parses a file, as ReadFileToString does.
absl::Status ReadTextProto(const std::string& path,
                           google::protobuf::Message* message,
                           uint64_t max_bytes = kDefaultMaxFileBytes);

// Text format of `message`.
std::string ToTextProto(const google::protobuf::Message& message);

// Writes `message` to `path` in text format, with a leading comment line
// (`header`, may be empty; control characters in it are escaped so that it
// stays one comment line). kPermissionDenied / kInternal on I/O errors.
absl::Status WriteTextProto(const std::string& path,
                            const google::protobuf::Message& message,
                            absl::string_view header = "");

// Reads a whole regular file of at most `max_bytes` bytes. Errors name the
// path: kNotFound / kPermissionDenied (...) when it cannot be opened (errno's
// code), kInvalidArgument when it is not a regular file (a directory, a
// device such as /dev/zero, a FIFO: never waits for a writer), and
// kResourceExhausted when it holds more than `max_bytes`, checked on what is
// read, not only on its stated size (files in /proc state 0).
absl::StatusOr<std::string> ReadFileToString(
    const std::string& path, uint64_t max_bytes = kDefaultMaxFileBytes);

// Writes `contents` to `path`, replacing it.
absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TEXT_IO_H_
