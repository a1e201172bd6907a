// File: plan_command_test.cc
// Drives `rdmaflow plan` through RunPlanCommand: tables, files written, exit
// statuses and messages for bad input.
#include "cli/plan_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/plan.pb.h"
#include "graph_analyzer/testing/small_traces.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

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
  // A dash spelling names the same flag as the underscore one.
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
       {"--pipeline_depth", "--alignment", "--metadata_bytes", "--no_share", "--min_shared_bytes",
        "--trace", "--min_trace_steps", "--out", "--dot", "--partitions",
        "--quiet", "--max_input_bytes"}) {
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

// Bad input exits 1, a bad option value 2 (a usage error), each saying why.
TEST(PlanCommandTest, BadInputExitsWithOneAndBadOptionsWithTwo) {
  Result r = RunPlan({"/nonexistent.pbtxt"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot open '/nonexistent.pbtxt'"));
  r = RunPlan({kMlp, "--pipeline_depth", "0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--pipeline_depth=0: expected an integer in "
                               "1 .. 16"));
  r = RunPlan({kMlp, "--alignment", "100"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("power of two"));
  std::string bad = TempPath("bad.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(
      bad, "node { name: \"x\" op: \"Relu\" input: \"y\" rank: 0 }\n"));
  r = RunPlan({bad});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.pbtxt: node 'x' (op Relu): input 'y' "
                               "names unknown node 'y'"));
}

TEST(PlanCommandTest, DirectoryIsNotAGraph) {
  std::string dir = TempPath("graphs");
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  Result r = RunPlan({dir});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("'" + dir +
                               "' is a directory, not a regular "
                               "file"));
  EXPECT_THAT(r.out, IsEmpty());
}

TEST(PlanCommandTest, EmptyAndCommentOnlyFilesHaveNoNodes) {
  std::string empty = TempPath("empty.pbtxt");
  std::string comments = TempPath("comments.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(empty, ""));
  ASSERT_OK(graph::WriteStringToFile(comments, "# a graph\n# to come\n"));
  for (const std::string& path : {empty, comments}) {
    Result r = RunPlan({path});
    EXPECT_EQ(r.status, 1) << path;
    EXPECT_THAT(r.err, HasSubstr(path + ": graph has no nodes"));
    EXPECT_THAT(r.out, Not(HasSubstr("0 ranks")));
  }
}

TEST(PlanCommandTest, DeviceIsRefusedWithoutReadingIt) {
  if (access("/dev/zero", R_OK) != 0) GTEST_SKIP() << "no /dev/zero here";
  Result r = RunPlan({"/dev/zero"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("'/dev/zero' is a character device, not a "
                               "regular file"));
}

TEST(PlanCommandTest, InputsAboveTheSizeLimitAreRefused) {
  // mlp_2ranks.pbtxt is 2.8 KiB; the trace, 5,000 bytes of comments.
  Result r = RunPlan({kMlp, "--max_input_bytes", "1000"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("'" + std::string(kMlp) +
                               "' is larger than the limit of 1000 bytes for "
                               "an input file; --max_input_bytes raises it"));
  std::string trace = TempPath("padded_trace.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(trace, std::string(5000, '#') + "\n"));
  r = RunPlan({kMlp, "--trace", trace, "--max_input_bytes", "4096"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("padded_trace.pbtxt' is larger than the limit"));
  EXPECT_EQ(RunPlan({kMlp, "--max_input_bytes", "1000000"}).status, 0);
  r = RunPlan({kMlp, "--max_input_bytes", "0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--max_input_bytes=0: expected an integer in "
                               "1 .. 1073741824"));
}

TEST(PlanCommandTest, ControlCharactersInNamesArePrintedEscaped) {
  std::string path = TempPath("control.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(path, R"pb(
    node {
      name: "evil\033[2J\nname"
      op: "Placeholder"
      output {
        dtype: DT_FLOAT32
        shape: [ 4 ]
      }
      rank: 0
    }
    node { name: "reader\007" op: "Relu" input: "evil\033[2J\nname" rank: 1 }
  )pb"));
  std::string dot = TempPath("control.dot");
  Result r = RunPlan({path, "--dot", dot});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("evil\\x1b[2J\\nname:0"));
  EXPECT_THAT(r.out, HasSubstr("reader\\x07"));
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.out.find('\a'), std::string::npos);
  ASSERT_OK_AND_ASSIGN(std::string dot_text, graph::ReadFileToString(dot));
  EXPECT_EQ(dot_text.find('\x1b'), std::string::npos);
  EXPECT_THAT(dot_text, HasSubstr("\"reader\\\\x07\""));
  // Error messages quote names too.
  ASSERT_OK(graph::WriteStringToFile(
      path, "node { name: \"z\\033[2J\" op: \"Relu\" input: \"q\" rank: 0 }"));
  r = RunPlan({path});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("node 'z\\x1b[2J' (op Relu)"));
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
}

TEST(PlanCommandTest, WarnsWhenARankRegistersMoreThanPhysicalMemory) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  ASSERT_GT(pages, 0);
  ASSERT_GT(page_size, 0);
  // One 4 TiB tensor, double-buffered: 8 TiB on each rank.
  if (static_cast<double>(pages) * page_size >= 8.0 * (uint64_t{1} << 40)) {
    GTEST_SKIP() << "this machine has 8 TiB of memory or more";
  }
  std::string path = TempPath("huge.pbtxt");
  ASSERT_OK(graph::WriteStringToFile(path, R"pb(
    name: "huge"
    node {
      name: "w"
      op: "Variable"
      output {
        dtype: DT_FLOAT32
        shape: [ 1048576, 1048576 ]
      }
      rank: 0
    }
    node { name: "y" op: "Relu" input: "w" rank: 1 }
  )pb"));
  Result r = RunPlan({path, "--quiet"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("16.0 TiB registered"));
  EXPECT_THAT(r.err, HasSubstr("rdmaflow plan: warning: rank 0 registers "
                               "8.00 TiB (receive 0 B, send 8.00 TiB)"));
  EXPECT_THAT(r.err, HasSubstr("rdmaflow plan: warning: rank 1 registers "
                               "8.00 TiB (receive 8.00 TiB, send 0 B), more "
                               "than the"));
  // A plan that fits gets no warning.
  r = RunPlan({kMlp, "--quiet"});
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(PlanCommandTest, ModelsAndStrategiesAreCheckedBeforeAnythingIsPlanned) {
  // --input is for model files only.
  Result r = RunPlan({kMlp, "--input", "8x784"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("is not one (a graph file carries its own shapes)"));
  // A zip that is no TorchScript.
  const std::string fake = TempPath("fake.pt");
  ASSERT_OK(graph::WriteStringToFile(fake, std::string("PK\x03\x04 not a model", 20)));
  r = RunPlan({fake});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("is a TorchScript model: give the sizes of its inputs"));
  r = RunPlan({fake, "--input", "8x1x28x28"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot be read"));
  for (const char* bad : {"8xx28", "8x0", "8x4:complex", "-1"}) {
    SCOPED_TRACE(bad);
    r = RunPlan({fake, "--input", bad});
    EXPECT_EQ(r.status, 2);  // A usage error.
    EXPECT_THAT(r.err, HasSubstr("--input"));
  }
  // A .pt2 that is no torch.export program; its --input is checked first.
  const std::string fake_export = TempPath("fake.pt2");
  ASSERT_OK(graph::WriteStringToFile(fake_export, std::string("PK\x03\x04 not a model", 20)));
  r = RunPlan({fake_export});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("torch.export program"));
  EXPECT_THAT(r.err, HasSubstr("cannot be read"));
  r = RunPlan({fake_export, "--input", "8x0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--input"));
  // A FIFO is refused, not opened (which would block).
  const std::string fifo = TempPath("plan.fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  r = RunPlan({fifo});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("regular file"));
  // A graph already spread over ranks cannot be placed again.
  r = RunPlan({kMlp, "--strategy", "ps:servers=1,workers=2"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("must be on rank 0 only"));
  r = RunPlan({kMlp, "--strategy", "allreduce"});
  EXPECT_EQ(r.status, 1);  // Already spread over ranks, as for ps.
  r = RunPlan({kMlp, "--strategy", "gossip"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown strategy 'gossip'"));
}

TEST(PlanCommandTest, AnAllReducePlacementSaysWhyNothingCrosses) {
  const std::string model = TempPath("small_cnn.pbtxt");
  ASSERT_OK(graph::WriteTextProto(
      model, graph::testing::TrainingGraphOf(graph::testing::SmallCnnTrace()),
      "a single-rank training step"));
  Result r = RunPlan({model, "--strategy", "allreduce:workers=2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("note: under allreduce no tensor crosses"));
  r = RunPlan({model, "--strategy", "ps:servers=1,workers=2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("note: under allreduce")));
}

}  // namespace
}  // namespace rdmaflow::cli
