// File: text_io_test.cc
// The file loader every reader of graphs, plans and traces goes through: only
// regular files, at most `max_bytes` of them whatever size the file states,
// and never a wait on a FIFO.
#include "graph_analyzer/text_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph.pb.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(TextIoTest, ReadsARegularFile) {
  std::string path = TempPath("small.txt");
  ASSERT_OK(WriteStringToFile(path, "hello"));
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(std::string("hello")));
  // Exactly at the limit is fine; one byte more is not.
  EXPECT_THAT(ReadFileToString(path, 5), IsOkAndHolds(std::string("hello")));
  EXPECT_THAT(ReadFileToString(path, 4),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("larger than the limit of 4 bytes")));
}

TEST(TextIoTest, EmptyFileReadsAsEmpty) {
  std::string path = TempPath("empty.txt");
  ASSERT_OK(WriteStringToFile(path, ""));
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(std::string()));
}

TEST(TextIoTest, MissingFileIsNotFoundWithTheReason) {
  EXPECT_THAT(ReadFileToString("/nonexistent/graph.pbtxt"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot open '/nonexistent/graph.pbtxt': "
                                 "No such file or directory")));
}

TEST(TextIoTest, DirectoryIsNotARegularFile) {
  std::string dir = TempPath("a_directory");
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  GraphDef graph;
  EXPECT_THAT(ReadTextProto(dir, &graph),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'" + dir +
                                 "' is a directory, not a "
                                 "regular file")));
}

TEST(TextIoTest, DeviceIsNotARegularFile) {
  if (access("/dev/zero", R_OK) != 0) GTEST_SKIP() << "no /dev/zero here";
  // Read to the end, /dev/zero never ends.
  EXPECT_THAT(ReadFileToString("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'/dev/zero' is a character device")));
}

TEST(TextIoTest, FifoIsRefusedWithoutWaitingForAWriter) {
  std::string fifo = TempPath("a_fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadFileToString(fifo),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is a FIFO, not a regular file")));
}

TEST(TextIoTest, StatedSizeIsNotTrusted) {
  // /proc files state a size of 0 but hold more; the limit is checked on
  // what is read.
  const char* path = "/proc/self/maps";
  struct stat info;
  if (stat(path, &info) != 0 || info.st_size != 0) {
    GTEST_SKIP() << "no /proc/self/maps of stated size 0 here";
  }
  EXPECT_THAT(ReadFileToString(path, 64),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("'/proc/self/maps' is larger than the limit "
                                 "of 64 bytes")));
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(Not(std::string())));
}

TEST(TextIoTest, DefaultLimitIs64MiB) {
  // A sparse file one byte over the limit: refused on its stated size,
  // without reading it.
  std::string path = TempPath("large.pbtxt");
  ASSERT_OK(WriteStringToFile(path, ""));
  ASSERT_EQ(truncate(path.c_str(), kDefaultMaxFileBytes + 1), 0);
  GraphDef graph;
  EXPECT_THAT(ReadTextProto(path, &graph),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("larger than the limit of 67108864 bytes")));
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
}

TEST(TextIoTest, HeaderStaysOneCommentLine) {
  std::string path = TempPath("header.pbtxt");
  GraphDef graph;
  graph.set_name("g");
  ASSERT_OK(WriteTextProto(path, graph, "from x\nnode { name: \"evil\" }"));
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFileToString(path));
  EXPECT_THAT(text, HasSubstr("# from x\\nnode { name: \"evil\" }\n"));
  GraphDef read;
  ASSERT_OK(ReadTextProto(path, &read));
  EXPECT_EQ(read.node_size(), 0);
}

}  // namespace
}  // namespace rdmaflow::graph
