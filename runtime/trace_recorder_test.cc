#include "runtime/trace_recorder.h"

#include <fstream>
#include <sstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "results/chrome_trace.pb.h"
#include "results/json.h"

namespace rdmaflow::runtime {
namespace {

using ::testing::HasSubstr;

// The recorder's JSON, read back as the trace format's message.
results::ChromeTrace Parse(const TraceRecorder& trace) {
  absl::StatusOr<std::string> json = trace.ToJson();
  EXPECT_OK(json.status());
  results::ChromeTrace parsed;
  EXPECT_OK(results::FromJson(json.value_or(""), &parsed));
  return parsed;
}

TEST(TraceRecorderTest, WritesChromeTraceEventsWithEscapedNames) {
  TraceRecorder trace(/*rank=*/3, /*enabled=*/true);
  const absl::Time begin = absl::FromUnixMicros(1000);
  trace.Add(TraceRecorder::Lane::kSend, "layer\"1\"/w:0", begin,
            begin + absl::Microseconds(250), /*peer=*/1, /*step=*/7, 4096);
  ASSERT_EQ(trace.size(), 1u);
  ASSERT_OK_AND_ASSIGN(const std::string json, trace.ToJson());
  EXPECT_THAT(json, HasSubstr(R"("layer\"1\"/w:0")"));
  EXPECT_THAT(json, HasSubstr(R"("traceEvents")"));

  const results::ChromeTrace parsed = Parse(trace);
  // The process row, four lane rows, then the event.
  ASSERT_EQ(parsed.traceevents_size(), 6);
  const results::TraceEvent& process = parsed.traceevents(0);
  EXPECT_EQ(process.ph(), "M");
  EXPECT_EQ(process.name(), "process_name");
  EXPECT_EQ(process.pid(), 3);
  EXPECT_EQ(process.args().name(), "rank 3");
  // A process row has no thread, time or category of its own.
  EXPECT_FALSE(process.has_tid());
  EXPECT_FALSE(process.has_ts());
  EXPECT_FALSE(process.has_cat());
  EXPECT_EQ(parsed.traceevents(1).name(), "thread_name");
  EXPECT_EQ(parsed.traceevents(1).args().name(), "send");
  const results::TraceEvent& event = parsed.traceevents(5);
  EXPECT_EQ(event.ph(), "X");
  EXPECT_EQ(event.name(), "layer\"1\"/w:0");
  EXPECT_EQ(event.cat(), "send");
  EXPECT_EQ(event.pid(), 3);
  EXPECT_TRUE(event.has_tid());  // lane 0 is printed, not left out as a zero
  EXPECT_EQ(event.tid(), 0);
  EXPECT_FALSE(event.args().has_name());
  EXPECT_EQ(event.ts(), 1000);
  EXPECT_EQ(event.dur(), 250);
  EXPECT_EQ(event.args().peer(), 1);
  EXPECT_EQ(event.args().step(), 7);
  EXPECT_EQ(event.args().bytes(), 4096);
  // Viewers need numbers, not the strings proto3 gives 64-bit integers.
  EXPECT_THAT(json, HasSubstr("\"ts\": 1000"));
  EXPECT_THAT(json, HasSubstr("\"dur\": 250"));

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
  trace.Add(TraceRecorder::Lane::kRecv, "x:0", absl::Now(), absl::Now(), 1, 0,
            8);
  EXPECT_EQ(trace.size(), 0u);
  const results::ChromeTrace parsed = Parse(trace);
  for (const results::TraceEvent& event : parsed.traceevents()) {
    EXPECT_EQ(event.ph(), "M") << event.name();
  }
}

}  // namespace
}  // namespace rdmaflow::runtime
