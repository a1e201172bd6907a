// File: text_io.cc
#include "graph_analyzer/text_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "graph_analyzer/display_text.h"

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

// "a directory", "a character device", ... for an error message.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

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

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
  // below. Reads of regular files ignore the flag.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "'"));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat '", path, "'"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is ", FileKind(info.st_mode),
                     ", not a regular file; give the path of a file"));
  }
  auto too_large = [&]() {
    return absl::ResourceExhaustedError(
        absl::StrCat("'", path, "' is larger than the limit of ", max_bytes,
                     " bytes for an input file"));
  };
  if (static_cast<uint64_t>(info.st_size) > max_bytes) return too_large();
  // The stated size is only a hint (files in /proc state 0, a file may grow
  // meanwhile): read until end of file, at most max_bytes + 1 bytes.
  std::string contents;
  contents.resize(std::min<uint64_t>(max_bytes, info.st_size) + 1);
  size_t filled = 0;
  while (true) {
    if (filled == contents.size()) {
      if (filled > max_bytes) return too_large();
      contents.resize(std::min<uint64_t>(max_bytes + 1, 2 * filled));
    }
    ssize_t got = read(fd, contents.data() + filled, contents.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("error reading '", path, "'"));
    }
    if (got == 0) break;
    filled += got;
  }
  if (filled > max_bytes) return too_large();
  contents.resize(filled);
  return contents;
}

absl::Status ReadTextProto(const std::string& path,
                           google::protobuf::Message* message,
                           uint64_t max_bytes) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, max_bytes));
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
  if (!header.empty()) text = absl::StrCat("# ", DisplayText(header), "\n");
  absl::StrAppend(&text, ToTextProto(message));
  return WriteStringToFile(path, text);
}

}  // namespace rdmaflow::graph
