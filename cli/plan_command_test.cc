// File: plan_command_test.cc
// Drives `rdmaflow plan` through RunPlanCommand: tables, files written, exit
// statuses and messages for bad input.
#include "cli/plan_command.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/plan.pb.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMlp[] = "graph_analyzer/testdata/mlp_2ranks.pbtxt";
constexpr char kSeq[] = "graph_analyzer/testdata/seq_dynamic_length.pbtxt";

struct Result {
  int status;
  std::string out;
  std::string err;
};

Result RunPlan(std::vector<std::string> args) {
  std::ostringstream out, err;
  int status = RunPlanCommand(args, out, err);
  return {status, out.str(), err.str()};
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(PlanCommandTest, PrintsLinkAndRankTables) {
  Result r = RunPlan({kMlp});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_THAT(r.out, HasSubstr("plan 'mlp_2ranks': 2 ranks, 2 links"));
  EXPECT_THAT(r.out, HasSubstr("link 0 -> 1: 1 tensors (1 static, 0 dynamic)"));
  EXPECT_THAT(r.out, HasSubstr("fc2_relu:0"));
  EXPECT_THAT(r.out, HasSubstr("region 128 KiB = 2 x 64.0 KiB"));
  EXPECT_THAT(r.out, HasSubstr("registered memory per rank"));
}

TEST(PlanCommandTest, WritesPlanDotAndPartitions) {
  std::string plan_path = TempPath("plan.pbtxt");
  std::string dot_path = TempPath("graph.dot");
  std::string parts = TempPath("parts");
  Result r = RunPlan({kSeq, "--pipeline-depth", "3", "--alignment=4096",
                  "--out", plan_path, "--dot", dot_path, "--partitions",
                  parts});
  ASSERT_EQ(r.status, 0) << r.err;
  plan::TransferPlan plan;
  ASSERT_OK(graph::ReadTextProto(plan_path, &plan));
  EXPECT_EQ(plan.config().pipeline_depth(), 3);
  EXPECT_EQ(plan.link(0).alignment(), 4096u);
  ASSERT_OK_AND_ASSIGN(std::string dot, graph::ReadFileToString(dot_path));
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_rank1"));
  EXPECT_THAT(dot, HasSubstr("\"encoder_pool\" -> \"features\" [label=\"64.0 "
                             "KiB\\nfloat32[32, 512]\""));
  EXPECT_THAT(dot, HasSubstr("label=\"dynamic\\nfloat32[32, -1, 512]\""));
  graph::GraphDef rank1;
  ASSERT_OK(graph::ReadTextProto(parts + "/rank1.pbtxt", &rank1));
  int recvs = 0;
  for (const auto& node : rank1.node()) recvs += node.op() == "Recv";
  EXPECT_EQ(recvs, 2);  // The hidden state and its pooled summary.
}

TEST(PlanCommandTest, TracePromotesStableTensors) {
  std::string trace_path = TempPath("trace.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(trace_path, R"pb(
    observation {
      tensor: "encoder_relu:0"
      step { dim: [ 32, 50, 512 ] }
      step { dim: [ 32, 50, 512 ] }
    }
  )pb"));
  Result r = RunPlan({kSeq, "--trace", trace_path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("promoted"));
  EXPECT_THAT(r.out, HasSubstr("promoted by tracing: 1 tensor(s)"));
}

TEST(PlanCommandTest, HelpDocumentsEveryOption) {
  Result r = RunPlan({"--help"});
  EXPECT_EQ(r.status, 0);
  for (const char* flag :
       {"--pipeline-depth", "--alignment", "--metadata-bytes", "--no-share",
        "--trace", "--min-trace-steps", "--out", "--dot", "--partitions",
        "--quiet"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST(PlanCommandTest, UsageErrorsExitWithTwo) {
  EXPECT_EQ(RunPlan({}).status, 2);
  Result r = RunPlan({kMlp, "--frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option '--frobnicate'"));
  r = RunPlan({kMlp, "--out"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--out needs a value"));
  r = RunPlan({kMlp, "--quiet=yes"});
  EXPECT_EQ(r.status, 2);
}

TEST(PlanCommandTest, BadInputExitsWithOneAndSaysWhy) {
  Result r = RunPlan({"/nonexistent.pbtxt"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot open '/nonexistent.pbtxt'"));
  r = RunPlan({kMlp, "--pipeline-depth", "0"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("--pipeline-depth=0: expected an integer in "
                               "1 .. 16"));
  r = RunPlan({kMlp, "--alignment", "100"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("power of two"));
  std::string bad = TempPath("bad.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(
      bad, "node { name: \"x\" op: \"Relu\" input: \"y\" rank: 0 }\n"));
  r = RunPlan({bad});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.pbtxt: node 'x' (op Relu): input 'y' "
                               "names unknown node 'y'"));
}

}  // namespace
}  // namespace rdmaflow::cli
