#include "runtime/trace_recorder.h"

#include <fstream>
#include <sstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TraceRecorderTest, WritesChromeTraceEventsWithEscapedNames) {
  TraceRecorder trace(/*rank=*/3, /*enabled=*/true);
  const absl::Time begin = absl::FromUnixMicros(1000);
  trace.Add(TraceRecorder::Lane::kSend, "layer\"1\"/w:0", begin,
            begin + absl::Microseconds(250), /*peer=*/1, /*step=*/7, 4096);
  ASSERT_EQ(trace.size(), 1u);
  const std::string json = trace.ToJson();
  EXPECT_THAT(json, HasSubstr("\"name\": \"layer\\\"1\\\"/w:0\""));
  EXPECT_THAT(json, HasSubstr("\"ph\": \"X\""));
  EXPECT_THAT(json, HasSubstr("\"ts\": 1000, \"dur\": 250"));
  EXPECT_THAT(json, HasSubstr("\"pid\": 3"));
  EXPECT_THAT(json, HasSubstr("\"step\": 7, \"bytes\": 4096"));
  EXPECT_THAT(json, HasSubstr("\"name\": \"rank 3\""));

  const std::string path = ::testing::TempDir() + "/trace.json";
  ASSERT_OK(trace.WriteFile(path));
  std::ifstream file(path);
  std::stringstream read;
  read << file.rdbuf();
  EXPECT_EQ(read.str(), json);
  EXPECT_THAT(trace.WriteFile("/nonexistent-dir/trace.json"),
              rdmaflow::testing::StatusIs(absl::StatusCode::kUnavailable));
}

TEST(TraceRecorderTest, DisabledRecorderKeepsNothing) {
  TraceRecorder trace(0, false);
  trace.Add(TraceRecorder::Lane::kRecv, "x:0", absl::Now(), absl::Now(), 1, 0, 8);
  EXPECT_EQ(trace.size(), 0u);
  EXPECT_THAT(trace.ToJson(), Not(HasSubstr("\"ph\": \"X\"")));
}

}  // namespace
}  // namespace rdmaflow::runtime
