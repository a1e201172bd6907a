// File: tracing_test.cc
#include "graph_analyzer/tracing.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Observe(plan::SizeTrace& trace, const std::string& tensor,
             const std::vector<std::vector<int64_t>>& shapes) {
  plan::SizeTrace::Observation* obs = trace.add_observation();
  obs->set_tensor(tensor);
  for (const auto& shape : shapes) {
    auto* step = obs->add_step();
    for (int64_t d : shape) step->add_dim(d);
  }
}

const plan::TensorSlot* FindSlot(const plan::TransferPlan& p,
                                 const std::string& tensor) {
  for (const auto& link : p.link()) {
    for (const auto& slot : link.slot()) {
      if (slot.tensor() == tensor) return &slot;
    }
  }
  return nullptr;
}

class TracingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(plan_,
                         PlanGraph(examples::SequenceDynamicLength(), {}));
    ASSERT_EQ(FindSlot(plan_, "encoder_relu:0")->kind(), plan::DYNAMIC);
    ASSERT_EQ(FindSlot(plan_, "decoder_grad:0")->kind(), plan::DYNAMIC);
  }
  plan::TransferPlan plan_;
};

TEST_F(TracingTest, PromotesStableTensorsAndKeepsChangingOnesDynamic) {
  plan::SizeTrace trace;
  Observe(trace, "encoder_relu:0", {{32, 100, 512}, {32, 100, 512}});
  Observe(trace, "decoder_grad:0", {{32, 100, 512}, {32, 120, 512}});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PromoteStableTensors(plan_, trace));
  const plan::TensorSlot* h = FindSlot(p, "encoder_relu:0");
  EXPECT_EQ(h->kind(), plan::STATIC);
  EXPECT_TRUE(h->promoted());
  EXPECT_THAT(h->spec().shape(), ElementsAre(32, 100, 512));
  EXPECT_EQ(h->bytes(), 32u * 100 * 512 * 4);
  EXPECT_EQ(FindSlot(p, "decoder_grad:0")->kind(), plan::DYNAMIC);
  EXPECT_THAT(p.promoted_tensor(), ElementsAre("encoder_relu:0"));
  // The region grew to hold the promoted tensor, and stays consistent.
  EXPECT_GE(p.link(0).stage_bytes(), h->offset() + h->bytes());
  EXPECT_GT(p.rank(1).receive_bytes(), plan_.rank(1).receive_bytes());
  EXPECT_GT(p.rank(0).send_bytes(), plan_.rank(0).send_bytes());
}

TEST_F(TracingTest, TooFewStepsDoNotPromote) {
  plan::SizeTrace trace;
  Observe(trace, "encoder_relu:0", {{32, 100, 512}});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PromoteStableTensors(plan_, trace));
  EXPECT_EQ(FindSlot(p, "encoder_relu:0")->kind(), plan::DYNAMIC);
  EXPECT_TRUE(p.promoted_tensor().empty());
  ASSERT_OK_AND_ASSIGN(p, PromoteStableTensors(plan_, trace, {.min_steps = 1}));
  EXPECT_EQ(FindSlot(p, "encoder_relu:0")->kind(), plan::STATIC);
}

TEST_F(TracingTest, ShapeContradictingTheSpecIsAnError) {
  plan::SizeTrace trace;
  Observe(trace, "encoder_relu:0", {{32, 100, 512}, {16, 100, 512}});
  EXPECT_THAT(PromoteStableTensors(plan_, trace),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("trace of tensor encoder_relu:0 at step 1: "
                                 "shape [16, 100, 512] contradicts its spec "
                                 "float32[32, -1, 512]")));
  trace.Clear();
  Observe(trace, "encoder_pool:0", {{32, 511}});
  EXPECT_THAT(PromoteStableTensors(plan_, trace),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("encoder_pool:0")));
}

TEST_F(TracingTest, UnknownOrDuplicateTensorIsAnError) {
  plan::SizeTrace trace;
  Observe(trace, "encoder_relu", {{32, 1, 512}});
  EXPECT_THAT(PromoteStableTensors(plan_, trace),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'encoder_relu', which the plan does not "
                                 "transfer")));
  trace.Clear();
  Observe(trace, "encoder_relu:0", {{32, 1, 512}});
  Observe(trace, "encoder_relu:0", {{32, 1, 512}});
  EXPECT_THAT(PromoteStableTensors(plan_, trace),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
}

TEST_F(TracingTest, RepeatedPromotionAccumulates) {
  plan::SizeTrace first;
  Observe(first, "encoder_relu:0", {{32, 7, 512}, {32, 7, 512}});
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan p, PromoteStableTensors(plan_, first));
  plan::SizeTrace second;
  Observe(second, "decoder_grad:0", {{32, 7, 512}, {32, 7, 512}});
  ASSERT_OK_AND_ASSIGN(p, PromoteStableTensors(p, second));
  EXPECT_THAT(p.promoted_tensor(),
              ElementsAre("decoder_grad:0", "encoder_relu:0"));
}

}  // namespace
}  // namespace rdmaflow::graph
