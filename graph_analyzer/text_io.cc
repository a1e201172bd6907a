// File: text_io.cc
#include "graph_analyzer/text_io.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace rdmaflow::graph {
namespace {

// Collects the parser's errors with 1-based line and column.
class ErrorCollector final : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorCollector(absl::string_view source) : source_(source) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    Add(line, column, message);
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    Add(line, column, absl::StrCat("warning: ", message));
  }

  std::string Text() const { return absl::StrJoin(lines_, "\n"); }

 private:
  void Add(int line, int column, const std::string& message) {
    if (lines_.size() < 10) {
      lines_.push_back(
          absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
    }
  }

  std::string source_;
  std::vector<std::string> lines_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view source,
                            google::protobuf::Message* message) {
  ErrorCollector errors(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  message->Clear();
  if (!parser.ParseFromString(std::string(text), message)) {
    std::string detail = errors.Text();
    return absl::InvalidArgumentError(
        detail.empty() ? absl::StrCat(source, ": malformed ",
                                      message->GetTypeName(), " text")
                       : detail);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path,
                                            "': ", strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  }
  return contents.str();
}

absl::Status ReadTextProto(const std::string& path,
                           google::protobuf::Message* message) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseTextProto(text, path, message);
}

std::string ToTextProto(const google::protobuf::Message& message) {
  google::protobuf::TextFormat::Printer printer;
  // "shape: [32, 784]" rather than one line per dimension.
  printer.SetUseShortRepeatedPrimitives(true);
  std::string text;
  printer.PrintToString(message, &text);
  return text;
}

absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write '", path, "': ", strerror(errno)));
  }
  out.write(contents.data(), contents.size());
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("error writing '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status WriteTextProto(const std::string& path,
                            const google::protobuf::Message& message,
                            absl::string_view header) {
  std::string text;
  if (!header.empty()) text = absl::StrCat("# ", header, "\n");
  absl::StrAppend(&text, ToTextProto(message));
  return WriteStringToFile(path, text);
}

}  // namespace rdmaflow::graph
