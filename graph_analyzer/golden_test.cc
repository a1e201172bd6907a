// File: golden_test.cc
// Graph in, plan out: every example graph in testdata/ plans to exactly its
// golden plan in testdata/golden/, and the checked-in graphs are what
// examples/example_graphs.cc builds. After an intended change, regenerate
// both with tools/update_plan_goldens.sh and review the diff.
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using google::protobuf::util::MessageDifferencer;

class GoldenTest : public ::testing::TestWithParam<examples::NamedGraph> {};

// Compares and, on a difference, prints it field by field.
void ExpectSame(const google::protobuf::Message& want,
                const google::protobuf::Message& got,
                const std::string& what) {
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(want, got))
      << what << " differs (run tools/update_plan_goldens.sh if intended):\n"
      << diff;
}

TEST_P(GoldenTest, CheckedInGraphMatchesItsGenerator) {
  GraphDef checked_in;
  ASSERT_OK(ReadTextProto("graph_analyzer/testdata/" + GetParam().file,
                          &checked_in));
  ExpectSame(GetParam().graph, checked_in, GetParam().file);
}

TEST_P(GoldenTest, PlanMatchesGolden) {
  std::string name = GetParam().file.substr(0, GetParam().file.find('.'));
  GraphDef graph;
  ASSERT_OK(ReadTextProto("graph_analyzer/testdata/" + GetParam().file,
                          &graph));
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       PlanGraph(std::move(graph), PlannerOptions{}));
  plan::TransferPlan golden;
  ASSERT_OK(ReadTextProto(
      "graph_analyzer/testdata/golden/" + name + ".plan.pbtxt", &golden));
  ExpectSame(golden, plan, name + ".plan.pbtxt");
}

INSTANTIATE_TEST_SUITE_P(
    Examples, GoldenTest, ::testing::ValuesIn(examples::AllExamples()),
    [](const ::testing::TestParamInfo<examples::NamedGraph>& info) {
      std::string name = info.param.file.substr(0, info.param.file.find('.'));
      for (char& c : name) {
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// What each example is meant to show, checked on its plan.
TEST(ExamplePlansTest, ParameterServerMovesEveryParameterBothWays) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p,
                       PlanGraph(examples::CnnParameterServer(2), {}));
  // server -> each worker (10 parameters), each worker -> server (10 grads).
  ASSERT_EQ(p.link_size(), 4);
  for (const plan::LinkRegion& link : p.link()) {
    EXPECT_EQ(link.slot_size(), 10);
    for (const plan::TensorSlot& slot : link.slot()) {
      EXPECT_EQ(slot.kind(), plan::STATIC) << slot.tensor();
    }
  }
}

TEST(ExamplePlansTest, LayerSeparatedKeepsFcParametersOnTheFcRank) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p,
                       PlanGraph(examples::CnnLayerSeparated(), {}));
  for (const plan::LinkRegion& link : p.link()) {
    for (const plan::TensorSlot& slot : link.slot()) {
      EXPECT_EQ(slot.tensor().find("fc/fc"), std::string::npos)
          << slot.tensor() << " left the FC rank";
    }
  }
}

TEST(ExamplePlansTest, SequenceModelHasDynamicAndStaticTransfers) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p,
                       PlanGraph(examples::SequenceDynamicLength(), {}));
  int dynamic = 0;
  int fixed = 0;
  for (const plan::LinkRegion& link : p.link()) {
    for (const plan::TensorSlot& slot : link.slot()) {
      (slot.kind() == plan::DYNAMIC ? dynamic : fixed)++;
    }
  }
  EXPECT_EQ(dynamic, 2);
  EXPECT_EQ(fixed, 2);
}

}  // namespace
}  // namespace rdmaflow::graph
