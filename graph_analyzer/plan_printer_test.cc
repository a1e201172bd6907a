// File: plan_printer_test.cc
// The plan's tables and DOT view print names escaped, and plans that need
// more registered memory than a machine has are flagged.
#include "graph_analyzer/plan_printer.h"

#include <string>
#include <utility>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/dot_writer.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Rank 0 sends "evil\x1b[2J\nname" to rank 1, read by "reader\a".
GraphDef GraphWithControlCharacters() {
  GraphBuilder b("graph\r");
  std::string x = b.Placeholder("evil\x1b[2J\nname", DT_FLOAT32, {4, 4});
  b.SetRank(1);
  b.Op("reader\a", "Relu", {x});
  return std::move(b).Build();
}

bool HasControlCharacter(const std::string& text) {
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n') || u == 0x7f) return true;
  }
  return false;
}

TEST(PlanPrinterTest, NamesAreEscapedInTables) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       PlanGraph(GraphWithControlCharacters(), {}));
  std::string text = FormatPlan(plan);
  EXPECT_FALSE(HasControlCharacter(text)) << text;
  EXPECT_THAT(text, HasSubstr("plan 'graph\\r'"));
  EXPECT_THAT(text, HasSubstr("evil\\x1b[2J\\nname:0"));
  EXPECT_THAT(text, HasSubstr("reader\\x07"));
}

TEST(PlanPrinterTest, NamesAreEscapedInDot) {
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph graph,
                       AnalyzeGraph(GraphWithControlCharacters()));
  std::string dot = GraphToDot(graph);
  EXPECT_FALSE(HasControlCharacter(dot)) << dot;
  // The id is the escaped name, quoted for DOT (backslashes doubled); the
  // label shows the escaped name on its first line.
  EXPECT_THAT(dot, HasSubstr("\"evil\\\\x1b[2J\\\\nname\" [label="
                             "\"evil\\\\x1b[2J\\\\nname\\nPlaceholder\"]"));
  EXPECT_THAT(dot,
              HasSubstr("\"evil\\\\x1b[2J\\\\nname\" -> \"reader\\\\x07\""));
}

TEST(PlanPrinterTest, WarnsOfRanksRegisteringMoreThanPhysicalMemory) {
  GraphBuilder b("big");
  std::string x = b.Placeholder("x", DT_FLOAT32, {1024, 1024});  // 4 MiB.
  b.SetRank(1);
  b.Op("y", "Relu", {x});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       PlanGraph(std::move(b).Build(), {}));
  // Depth 2: each rank registers 8 MiB (rank 0 to send, rank 1 to receive).
  EXPECT_THAT(RegisteredMemoryWarnings(plan, uint64_t{8} << 20), IsEmpty());
  std::vector<std::string> warnings =
      RegisteredMemoryWarnings(plan, (uint64_t{8} << 20) - 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("rank 0 registers 8.00 MiB (receive 0 B, "
                                     "send 8.00 MiB), more than the"));
  EXPECT_THAT(warnings[1], HasSubstr("rank 1 registers 8.00 MiB (receive "
                                     "8.00 MiB, send 0 B)"));
}

}  // namespace
}  // namespace rdmaflow::graph
