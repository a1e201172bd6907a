#include "results/json.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "results/chrome_trace.pb.h"
#include "results/results.pb.h"
#include "results/run_info.h"

namespace rdmaflow::results {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::google::protobuf::util::MessageDifferencer;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

BenchmarkReport AllReduceReport() {
  BenchmarkReport report;
  *report.mutable_run() =
      NewRunInfo("allreduce_bench", absl::FromUnixMillis(1795000000123));
  report.mutable_run()->set_transport("ucx");
  report.mutable_run()->set_params("tls=shm");
  report.mutable_run()->set_description("UCX 1.13 \"shm\"\n");
  AllReduceResults& results = *report.mutable_allreduce();
  results.set_memcpy_gbps(12.5);
  // reduce_gbps stays 0: it must still be printed.
  AllReduceRow& row = *results.add_rows();
  row.set_impl("gloo");
  row.set_ranks(4);
  row.set_bytes(double{int64_t{3} << 30});  // beyond int32
  row.set_iterations(5);
  row.set_time_us(1234.5);
  row.set_algbw_gbps(2.5);
  row.set_busbw_gbps(3.75);
  return report;
}

// `json` as a generic JSON object, to see which values are numbers.
Struct Parse(const std::string& json) {
  Struct object;
  EXPECT_OK(FromJson(json, &object));
  return object;
}

TEST(JsonTest, ReportRoundTripsThroughThePrinterAndParser) {
  const BenchmarkReport report = AllReduceReport();
  for (JsonLayout layout : {JsonLayout::kIndented, JsonLayout::kOneLine}) {
    ASSERT_OK_AND_ASSIGN(std::string json, ToJson(report, layout));
    BenchmarkReport parsed;
    ASSERT_OK(FromJson(json, &parsed));
    EXPECT_TRUE(MessageDifferencer::Equals(report, parsed)) << json;
  }
}

TEST(JsonTest, FieldNamesAreSnakeCaseAndZerosArePrinted) {
  ASSERT_OK_AND_ASSIGN(std::string json, ToJson(AllReduceReport()));
  EXPECT_THAT(json, HasSubstr("\"memcpy_gbps\""));
  EXPECT_THAT(json, HasSubstr("\"busbw_gbps\""));
  EXPECT_THAT(json, HasSubstr("\"start_time\""));
  EXPECT_THAT(json, Not(HasSubstr("memcpyGbps")));
  const Struct object = Parse(json);
  const Struct& allreduce = object.fields().at("allreduce").struct_value();
  EXPECT_EQ(allreduce.fields().at("reduce_gbps").kind_case(),
            Value::kNumberValue);
  EXPECT_EQ(allreduce.fields().at("reduce_gbps").number_value(), 0);
  // Only the report's own kind is there.
  EXPECT_EQ(object.fields().count("pingpong"), 0u);
  EXPECT_EQ(object.fields().count("ablation"), 0u);
}

TEST(JsonTest, CountsAndSizesAreJsonNumbers) {
  ASSERT_OK_AND_ASSIGN(std::string json, ToJson(AllReduceReport()));
  const Struct object = Parse(json);
  const Struct& row = object.fields()
                          .at("allreduce")
                          .struct_value()
                          .fields()
                          .at("rows")
                          .list_value()
                          .values(0)
                          .struct_value();
  for (const char* field : {"ranks", "bytes", "iterations", "time_us"}) {
    EXPECT_EQ(row.fields().at(field).kind_case(), Value::kNumberValue) << field;
  }
  EXPECT_EQ(row.fields().at("bytes").number_value(), 3221225472.0);
  // Whole byte counts print without a fraction, as readers' %d expect.
  EXPECT_THAT(json, HasSubstr("\"bytes\": 3221225472"));
  EXPECT_THAT(json, Not(HasSubstr("3221225472.")));
  // The start time is RFC 3339.
  EXPECT_EQ(object.fields()
                .at("run")
                .struct_value()
                .fields()
                .at("start_time")
                .string_value(),
            "2026-11-18T11:06:40.123Z");
}

TEST(JsonTest, OneLineLayoutIsOneLine) {
  ASSERT_OK_AND_ASSIGN(std::string json,
                       ToJson(AllReduceReport(), JsonLayout::kOneLine));
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.back(), '\n');
  // The description's newline is escaped, not printed.
  EXPECT_EQ(json.find('\n'), json.size() - 1) << json;
}

TEST(JsonTest, StringsAreEscaped) {
  TraceEvent event;
  event.set_name("layer\"1\"\\w:0\t\x01");
  ChromeTrace trace;
  *trace.add_traceevents() = event;
  ASSERT_OK_AND_ASSIGN(std::string json, ToJson(trace));
  EXPECT_THAT(json, HasSubstr("\"traceEvents\""));
  EXPECT_THAT(json, HasSubstr(R"("layer\"1\"\\w:0\t\u0001")"));
  ChromeTrace parsed;
  ASSERT_OK(FromJson(json, &parsed));
  EXPECT_EQ(parsed.traceevents(0).name(), event.name());
}

TEST(JsonTest, FromJsonRejectsOtherSchemas) {
  BenchmarkReport report;
  EXPECT_THAT(
      FromJson(R"({"run": {"tool": "x"}, "no_such_field": 1})", &report),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FromJson("{\"run\": ", &report),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(JsonTest, WriteJsonFileWritesTheJsonOrNamesThePath) {
  const BenchmarkReport report = AllReduceReport();
  const std::string path = ::testing::TempDir() + "/report.json";
  ASSERT_OK(WriteJsonFile(report, path));
  std::ifstream file(path);
  std::stringstream read;
  read << file.rdbuf();
  ASSERT_OK_AND_ASSIGN(std::string json, ToJson(report));
  EXPECT_EQ(read.str(), json);
  const absl::Status status = WriteJsonFile(report, "/no/such/dir/report.json");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("/no/such/dir/report.json"));
}

TEST(RunInfoTest, NamesToolHostAndStart) {
  const absl::Time start = absl::FromUnixNanos(1795000000123456789);
  const RunInfo run = NewRunInfo("ablation", start);
  EXPECT_EQ(run.tool(), "ablation");
  EXPECT_FALSE(run.host().empty());
  EXPECT_EQ(run.start_time().seconds(), 1795000000);
  EXPECT_EQ(run.start_time().nanos(), 123456789);
}

}  // namespace
}  // namespace rdmaflow::results
