// BucketPipeline with two ranks as threads over loopback: a bucket's
// all-reduce runs while compute is still running (the compute waits for it
// to begin, so a pipeline that reduced only after compute would time out
// here), the sums are exact, a bucket backward never reaches is reduced
// after compute, a failed compute ends the step with its error and gives
// the loop back; the idle work runs on the communication thread while a
// bucket is not yet due and after the last one until compute returns, and
// its error fails the step. With marks (gradients a device writes) a
// bucket goes only once its mark says its work is complete, and a failed
// or stuck mark fails the step.
#include "strategies/bucket_pipeline.h"

#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/testing/rank_threads.h"
#include "strategies/data_parallel.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(30);

// Three layers' weights (parameters 0..2) and one parameter forward never
// uses (3). Each in a bucket of its own (bucket_bytes 64 and 16 floats
// each): the last layer's first, as the allreduce strategy orders them, so
// that backward fills bucket 0 first.
std::vector<Parameter> MakeParameters() {
  std::vector<Parameter> parameters;
  for (const char* name : {"w3", "w2", "w1", "unused"}) {
    parameters.push_back({name, at::full({16}, 0.5).requires_grad_()});
  }
  return parameters;
}

// loss = sum(w3 * relu(w2 * relu(w1 * x))) with x = rank + 1: every
// gradient is a known function of the rank.
at::Tensor Loss(const std::vector<Parameter>& p, int rank) {
  const at::Tensor x = at::full({16}, static_cast<double>(rank + 1));
  at::Tensor h1 = at::relu(p[2].tensor * x);
  at::Tensor h2 = at::relu(p[1].tensor * h1);
  return (p[0].tensor * h2).sum();
}

// What rank `rank`'s backward puts into parameter i's gradient (all
// entries equal): with every weight 0.5 and x = r + 1.
float Gradient(size_t i, int rank) {
  const float x = static_cast<float>(rank + 1);
  switch (i) {
    case 0: return 0.5f * 0.5f * x;   // w3: h2 = w2 * w1 * x
    case 1: return 0.5f * 0.5f * x;   // w2: w3 * h1
    case 2: return 0.5f * 0.5f * x;   // w1: w3 * w2 * x
    default: return 0;
  }
}

struct Rank {
  std::unique_ptr<onesided::ProgressLoop> loop;
  std::unique_ptr<onesided::PeerLinks> links;
  std::unique_ptr<DataParallelGroup> group;
  std::unique_ptr<BucketPipeline> pipeline;
  std::vector<Parameter> parameters;

  // `timeout`: the group's, for each all-reduce.
  absl::Status SetUp(int rank, rdma::Transport& transport, rdma::Store& store,
                     absl::Duration timeout = kDeadline) {
    onesided::ProgressLoopOptions options;
    options.name = absl::StrCat("rank ", rank);
    loop = std::make_unique<onesided::ProgressLoop>(transport, options);
    ASSIGN_OR_RETURN(links, onesided::PeerLinks::Create(transport, store, "pipeline", *loop, {}));
    parameters = MakeParameters();
    DataParallelOptions group_options;
    group_options.bucket_bytes = 64;
    group_options.chunk_bytes = 64;
    group_options.timeout = timeout;
    ASSIGN_OR_RETURN(group, DataParallelGroup::Create(*links, {0, 1}, parameters, group_options));
    if (group->buckets() != 4) {
      return absl::InternalError(absl::StrCat(group->buckets(), " buckets, 4 expected"));
    }
    ASSIGN_OR_RETURN(pipeline, BucketPipeline::Create(*group, *loop));
    return absl::OkStatus();
  }
};

TEST(BucketPipelineTest, BucketsAreReducedWhileComputeRunsAndSumExactly) {
  at::set_num_threads(1);
  std::vector<PipelinedStep> steps(2);
  std::vector<std::vector<float>> sums(2);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        Rank r;
        RETURN_IF_ERROR(r.SetUp(rank, transport, store));
        for (int step = 0; step < 3; ++step) {
          r.group->ZeroGradients();
          ComputeFn compute = [&]() -> absl::StatusOr<ComputeResult> {
            Loss(r.parameters, rank).backward();
            // Backward has filled buckets 0..2: the first of them is on its
            // way before compute returns, or never (a pipeline that waited
            // for compute) and this times out.
            const absl::Time deadline = absl::Now() + kDeadline;
            while (r.pipeline->buckets_begun() < 1) {
              if (absl::Now() > deadline) {
                return absl::DeadlineExceededError("no bucket began during compute");
              }
              std::this_thread::yield();
            }
            return ComputeResult{1.0, 0, 1};
          };
          ASSIGN_OR_RETURN(steps[rank], r.pipeline->Run(compute));
        }
        if (!r.loop->OnLoopThread()) return absl::InternalError("the loop was not given back");
        for (const Parameter& p : r.parameters) {
          sums[rank].push_back(p.tensor.grad()[0].item<float>());
        }
        return r.group->Shutdown();
      });
  for (const absl::Status& s : statuses) ASSERT_OK(s);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_GE(steps[rank].overlapped, 1);
    ASSERT_EQ(steps[rank].buckets.size(), 4u);
    EXPECT_GE(steps[rank].buckets[0].begin, steps[rank].compute_begin);
    EXPECT_LT(steps[rank].buckets[0].begin, steps[rank].compute_end);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(sums[rank][i], Gradient(i, 0) + Gradient(i, 1)) << "parameter " << i;
    }
  }
}

TEST(BucketPipelineTest, AFailedComputeEndsTheStepWithItsError) {
  at::set_num_threads(1);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        Rank r;
        RETURN_IF_ERROR(r.SetUp(rank, transport, store));
        r.group->ZeroGradients();
        // No backward at all: no bucket is ever due, and the error ends it.
        absl::StatusOr<PipelinedStep> step = r.pipeline->Run(
            []() -> absl::StatusOr<ComputeResult> { return absl::DataLossError("bad batch"); });
        EXPECT_THAT(step.status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad batch")));
        EXPECT_EQ(r.pipeline->buckets_begun(), 0);
        EXPECT_TRUE(r.loop->OnLoopThread()) << "the loop was not given back";
        return absl::OkStatus();
      });
  for (const absl::Status& s : statuses) EXPECT_OK(s);
}

TEST(BucketPipelineTest, ABackwardRunTwiceInOneStepFailsTheStep) {
  at::set_num_threads(1);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        Rank r;
        // The ranks may stop at different buckets (each stops at its own
        // second backward), leaving the other's all-reduce to time out.
        RETURN_IF_ERROR(r.SetUp(rank, transport, store, absl::Seconds(2)));
        r.group->ZeroGradients();
        absl::StatusOr<PipelinedStep> step =
            r.pipeline->Run([&]() -> absl::StatusOr<ComputeResult> {
              Loss(r.parameters, rank).backward();
              Loss(r.parameters, rank).backward();  // two micro-batches
              return ComputeResult{1.0, 0, 1};
            });
        EXPECT_THAT(step.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("accumulated twice")));
        return absl::OkStatus();
      });
  for (const absl::Status& s : statuses) EXPECT_OK(s);
}

TEST(BucketPipelineTest, ACodecGroupIsRefused) {
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(auto links, onesided::PeerLinks::Create(transport, store, "c", loop, {}));
        DataParallelOptions options;
        options.codec = "int8";
        ASSIGN_OR_RETURN(auto group,
                         DataParallelGroup::Create(*links, {0}, MakeParameters(), options));
        EXPECT_THAT(BucketPipeline::Create(*group, loop).status(),
                    StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("codec")));
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

// A part of a bucket is reduced only where it lies in the bucket and holds
// whole elements; anything else is refused before the ring sees it.
TEST(DataParallelGroupTest, APartOutsideItsBucketIsRefused) {
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(auto links, onesided::PeerLinks::Create(transport, store, "p", loop, {}));
        ASSIGN_OR_RETURN(auto group,
                         DataParallelGroup::Create(*links, {0}, MakeParameters(), {}));
        const size_t bytes = group->bucket(0).bytes;
        EXPECT_OK(group->AllReduceWrittenPart(0, 0, bytes));
        EXPECT_OK(group->AllReduceWrittenPart(0, 4, bytes - 4));
        for (const auto& [begin, length] : std::vector<std::pair<size_t, size_t>>{
                 {bytes + 4, 0}, {0, bytes + 4}, {4, bytes}, {2, 4}, {0, 6},
                 {8, std::numeric_limits<size_t>::max() - 4}}) {
          EXPECT_THAT(group->AllReduceWrittenPart(0, begin, length),
                      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bucket 0")))
              << begin << " +" << length;
        }
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

// One rank, the general form: each bucket's work and the idle work record
// on which thread they ran and when.
struct IdleRank {
  std::vector<Parameter> parameters = MakeParameters();
  std::atomic<int> idle_calls{0};
  std::atomic<int> buckets_done{0};
  std::atomic<int> idle_after_last{0};  // idle calls once every bucket was done
  std::thread::id communication;

  absl::StatusOr<std::unique_ptr<BucketPipeline>> Make(onesided::ProgressLoop& loop,
                                                       absl::Status idle_result) {
    ASSIGN_OR_RETURN(auto pipeline,
                     BucketPipeline::Create(
                         parameters, {{0}, {1}, {2}, {3}},
                         [this](size_t) {
                           communication = std::this_thread::get_id();
                           buckets_done.fetch_add(1);
                           return absl::OkStatus();
                         },
                         loop, "the test's buckets"));
    pipeline->set_idle([this, idle_result]() -> absl::StatusOr<bool> {
      if (buckets_done.load() == 4) idle_after_last.fetch_add(1);
      idle_calls.fetch_add(1);
      if (!idle_result.ok()) return idle_result;
      return false;
    });
    return pipeline;
  }
};

// Waits up to kDeadline for `done`; the compute's error otherwise.
absl::Status AwaitInCompute(const std::function<bool()>& done, const char* what) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (!done()) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError(what);
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

TEST(BucketPipelineTest, IdleWorkRunsWhileNoBucketIsDueAndEndsWithCompute) {
  at::set_num_threads(1);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        IdleRank r;
        ASSIGN_OR_RETURN(auto pipeline, r.Make(loop, absl::OkStatus()));
        ASSIGN_OR_RETURN(PipelinedStep step,
                         pipeline->Run([&]() -> absl::StatusOr<ComputeResult> {
          // Before backward no bucket is due: the idle work runs, or this
          // times out.
          RETURN_IF_ERROR(AwaitInCompute([&] { return r.idle_calls.load() >= 2; },
                                         "no idle work before the first bucket"));
          if (r.buckets_done.load() != 0) return absl::InternalError("a bucket went early");
          Loss(r.parameters, 0).backward();
          // Buckets 0..2 go; bucket 3 (unused) waits for compute's end,
          // and the idle work goes on meanwhile.
          RETURN_IF_ERROR(AwaitInCompute([&] { return r.buckets_done.load() == 3; },
                                         "the buckets did not go during compute"));
          const int before = r.idle_calls.load();
          RETURN_IF_ERROR(AwaitInCompute([&] { return r.idle_calls.load() > before; },
                                         "no idle work after the buckets went"));
          return ComputeResult{1.0, 0, 1};
        }));
        EXPECT_EQ(step.buckets.size(), 4u);
        EXPECT_EQ(r.buckets_done.load(), 4);
        EXPECT_NE(r.communication, std::this_thread::get_id());
        // Compute's end makes bucket 3 due and ends the idle work: none of
        // it ran after the last bucket (the thread is joined: the count is
        // final).
        EXPECT_EQ(r.idle_after_last.load(), 0);
        EXPECT_TRUE(loop.OnLoopThread()) << "the loop was not given back";
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

TEST(BucketPipelineTest, AFailedIdleWorkFailsTheStepAndNoBucketGoesAfterIt) {
  at::set_num_threads(1);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        IdleRank r;
        ASSIGN_OR_RETURN(auto pipeline, r.Make(loop, absl::UnavailableError("server 0 is gone")));
        absl::StatusOr<PipelinedStep> step =
            pipeline->Run([&]() -> absl::StatusOr<ComputeResult> {
              RETURN_IF_ERROR(AwaitInCompute([&] { return r.idle_calls.load() >= 1; },
                                             "no idle work before the first bucket"));
              Loss(r.parameters, 0).backward();
              return ComputeResult{1.0, 0, 1};
            });
        EXPECT_THAT(step.status(),
                    StatusIs(absl::StatusCode::kUnavailable,
                             AllOf(HasSubstr("the test's buckets, waiting for bucket 0 of 4"),
                                   HasSubstr("server 0 is gone"))));
        EXPECT_EQ(r.idle_calls.load(), 1);
        EXPECT_EQ(r.buckets_done.load(), 0);
        EXPECT_TRUE(loop.OnLoopThread()) << "the loop was not given back";
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

// Gradients a device writes: a bucket goes only once the mark recorded as
// backward queued its last gradient says the work is complete. Each
// bucket's mark is polled before the bucket goes, and no bucket goes
// while its mark says no; a bucket backward never reaches is marked once
// compute returns.
TEST(BucketPipelineTest, ADeviceBucketGoesOnlyOnceItsMarkSaysItsWritten) {
  at::set_num_threads(1);
  std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
      1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        std::vector<Parameter> parameters = MakeParameters();
        std::atomic<bool> released[4] = {false, false, false, false};
        std::atomic<int> polled[4] = {0, 0, 0, 0};
        std::atomic<int> marks{0}, done{0};
        std::atomic<bool> early{false};
        ASSIGN_OR_RETURN(auto pipeline,
                         BucketPipeline::Create(
                             parameters, {{0}, {1}, {2}, {3}},
                             [&](size_t b) {
                               if (!released[b].load()) early.store(true);
                               done.fetch_add(1);
                               return absl::OkStatus();
                             },
                             loop, "the test's buckets"));
        pipeline->set_ready_marks(
            [&](size_t b) -> absl::StatusOr<BucketPipeline::ReadyPoll> {
              marks.fetch_add(1);
              return BucketPipeline::ReadyPoll([&, b]() -> absl::StatusOr<bool> {
                polled[b].fetch_add(1);
                return released[b].load();
              });
            },
            kDeadline);
        ASSIGN_OR_RETURN(PipelinedStep step,
                         pipeline->Run([&]() -> absl::StatusOr<ComputeResult> {
          Loss(parameters, 0).backward();
          for (int b = 0; b < 3; ++b) {
            // The communication thread waits on bucket b's mark...
            RETURN_IF_ERROR(AwaitInCompute([&] { return polled[b].load() > 0; },
                                           "a bucket's mark was never polled"));
            if (done.load() != b) return absl::InternalError("a bucket went before its mark");
            // ...and the bucket goes once the mark says so.
            released[b].store(true);
            RETURN_IF_ERROR(AwaitInCompute([&] { return done.load() == b + 1; },
                                           "a bucket did not go after its mark"));
          }
          if (marks.load() != 3) return absl::InternalError("bucket 3 marked during compute");
          released[3].store(true);  // compute's own work for it, done
          return ComputeResult{1.0, 0, 1};
        }));
        EXPECT_EQ(step.buckets.size(), 4u);
        EXPECT_EQ(done.load(), 4);
        EXPECT_EQ(marks.load(), 4);  // the unused bucket 3's once compute returned
        EXPECT_GT(polled[3].load(), 0);
        EXPECT_FALSE(early.load());
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

// A mark that cannot be made, or whose work never completes, fails the
// step naming the bucket; no bucket goes after it.
TEST(BucketPipelineTest, AFailedOrStuckMarkFailsTheStep) {
  at::set_num_threads(1);
  for (const bool stuck : {false, true}) {
    SCOPED_TRACE(stuck ? "stuck" : "failed");
    std::vector<absl::Status> statuses = rdma::testing::RunRankThreads(
        1, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          onesided::ProgressLoop loop(transport, {});
          std::vector<Parameter> parameters = MakeParameters();
          std::atomic<int> done{0};
          ASSIGN_OR_RETURN(auto pipeline, BucketPipeline::Create(
                                              parameters, {{0}, {1}, {2}, {3}},
                                              [&](size_t) {
                                                done.fetch_add(1);
                                                return absl::OkStatus();
                                              },
                                              loop, "the test's buckets"));
          pipeline->set_ready_marks(
              [stuck](size_t) -> absl::StatusOr<BucketPipeline::ReadyPoll> {
                if (!stuck) return absl::InternalError("no events left");
                return BucketPipeline::ReadyPoll(
                    []() -> absl::StatusOr<bool> { return false; });
              },
              absl::Milliseconds(20));
          absl::StatusOr<PipelinedStep> step =
              pipeline->Run([&]() -> absl::StatusOr<ComputeResult> {
                Loss(parameters, 0).backward();
                return ComputeResult{1.0, 0, 1};
              });
          if (stuck) {
            EXPECT_THAT(step.status(),
                        StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 HasSubstr("writing the gradients of bucket 0 of 4")));
          } else {
            EXPECT_THAT(step.status(),
                        StatusIs(absl::StatusCode::kInternal,
                                 AllOf(HasSubstr("marking the device work of bucket 0 of 4"),
                                       HasSubstr("no events left"))));
          }
          EXPECT_EQ(done.load(), 0);
          return absl::OkStatus();
        });
    EXPECT_OK(statuses[0]);
  }
}

}  // namespace
}  // namespace rdmaflow::strategies
