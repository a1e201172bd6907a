// RdmaflowWork's Future: made on the first getFuture() for host outputs,
// whether the Work completed before or after, with the outputs or the
// error; callbacks chained before completion run once; the same Future
// every time; and a getFuture() racing the engine thread's Complete()
// always ends with a completed Future.
#include "torch_backend/work.h"

#include <thread>
#include <vector>

#include "ATen/ops/full.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::torch_backend {
namespace {

using ::testing::HasSubstr;

c10::intrusive_ptr<RdmaflowWork> NewWork() {
  return c10::make_intrusive<RdmaflowWork>(0, c10d::OpType::ALLREDUCE,
                                           std::vector<at::Tensor>{at::full({4}, 3.0f)});
}

// The Future holds the Work's one output tensor, the same tensor.
void ExpectOutputs(RdmaflowWork& work, c10::ivalue::Future& future) {
  ASSERT_TRUE(future.completed());
  ASSERT_FALSE(future.hasError()) << future.tryRetrieveErrorMessage();
  const std::vector<at::Tensor> held = future.value().toTensorVector();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_TRUE(held[0].is_same(work.result()[0]));
}

TEST(WorkTest, TheFutureHoldsTheOutputsWhenTakenBeforeOrAfterCompletion) {
  for (bool before : {true, false}) {
    SCOPED_TRACE(before ? "taken before" : "taken after");
    c10::intrusive_ptr<RdmaflowWork> work = NewWork();
    c10::intrusive_ptr<c10::ivalue::Future> early;
    int ran = 0;
    if (before) {
      early = work->getFuture();
      EXPECT_FALSE(early->completed());
      early->addCallback([&](c10::ivalue::Future& f) {
        ++ran;
        EXPECT_FALSE(f.hasError());
      });
    }
    work->Complete(absl::OkStatus());
    EXPECT_TRUE(work->isCompleted());
    EXPECT_TRUE(work->wait());
    c10::intrusive_ptr<c10::ivalue::Future> future = work->getFuture();
    if (before) {
      EXPECT_EQ(future.get(), early.get()) << "a second Future";
      EXPECT_EQ(ran, 1);
    }
    EXPECT_EQ(work->getFuture().get(), future.get());
    ExpectOutputs(*work, *future);
  }
}

TEST(WorkTest, TheFutureCarriesTheError) {
  for (bool before : {true, false}) {
    SCOPED_TRACE(before ? "taken before" : "taken after");
    c10::intrusive_ptr<RdmaflowWork> work = NewWork();
    c10::intrusive_ptr<c10::ivalue::Future> early;
    if (before) early = work->getFuture();
    work->Complete(absl::UnavailableError("rank 1 is gone"));
    EXPECT_THROW(work->wait(), std::exception);
    c10::intrusive_ptr<c10::ivalue::Future> future = work->getFuture();
    ASSERT_TRUE(future->completed());
    ASSERT_TRUE(future->hasError());
    EXPECT_THAT(future->tryRetrieveErrorMessage(), HasSubstr("rank 1 is gone"));
    // Only the first completion counts.
    work->Complete(absl::OkStatus());
    EXPECT_TRUE(work->getFuture()->hasError());
  }
}

TEST(WorkTest, AFutureTakenWhileTheWorkCompletesIsCompleted) {
  for (int round = 0; round < 300; ++round) {
    c10::intrusive_ptr<RdmaflowWork> work = NewWork();
    std::thread engine([&] { work->Complete(absl::OkStatus()); });
    c10::intrusive_ptr<c10::ivalue::Future> future = work->getFuture();
    engine.join();
    ASSERT_TRUE(future->completed()) << "round " << round << ": a Future never completed";
    ExpectOutputs(*work, *future);
  }
}

}  // namespace
}  // namespace rdmaflow::torch_backend
