// File: compressed_allreduce_slow_peer_test.cc
// CompressedAllReduce with a member slower than the timeout: ranks 0 and 1
// call, rank 2 calls only once both have given up. The waiting ranks get
// kDeadlineExceeded naming what they waited for; they abandon their
// messages (whose callbacks point at the call's frame: under ASan, one that
// fired later would be a use after return); the straggler's late messages
// are consumed and discarded, never written into the callers' tensors; the
// exchange is then unusable, by name; and the straggler, whose messages
// from the others were abandoned but still went out whole, completes.
#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "compression/compressed_allreduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::compression {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kCount = 3000;
constexpr char kNs[] = "compressed_slow_peer_test";

std::vector<float> Gradient(int rank) {
  std::mt19937 gen(static_cast<uint32_t>(rank + 1));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(kCount);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(CompressedAllReduceSlowPeerTest, TheWaitingMembersLetGoAndTheLateMessagesLandNowhere) {
  absl::Status calls[3], again[2];
  bool unchanged[2] = {false, false};
  const std::string gone = absl::StrCat(kNs, "/gone");
  const std::string all_gone = absl::StrCat(kNs, "/all_gone");
  std::atomic<bool> straggler_done{false};
  std::vector<absl::Status> results = RunRankThreads(
      3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, onesided::ProgressLoopOptions{});
        CompressedAllReduceOptions options;
        options.codec = "topk:ratio=0.02";
        options.seed = 7;
        options.group.ring.chunk_bytes = 4096;
        options.group.ring.timeout = rank == 2 ? absl::Seconds(2) : absl::Seconds(1);
        ASSIGN_OR_RETURN(auto exchange,
                         CompressedAllReduce::Create(loop, store, kNs, {0, 1, 2}, kCount, options));
        std::vector<float> data = Gradient(rank);
        if (rank == 2) {
          RETURN_IF_ERROR(store.Wait({all_gone}, absl::Seconds(30)));
          // Its messages go out; the others' never come.
          calls[2] = exchange->AllReduce(absl::MakeSpan(data), 1.0f);
          straggler_done = true;
          return absl::OkStatus();
        }
        calls[rank] = exchange->AllReduce(absl::MakeSpan(data), 1.0f);
        // What the caller holds once the call gave up: the tensor is its
        // own again.
        std::fill(data.begin(), data.end(), -7.0f);
        ASSIGN_OR_RETURN(int64_t left, store.Add(gone, 1));
        if (left == 2) RETURN_IF_ERROR(store.Set(all_gone, "1"));
        // Keep progressing while the straggler's messages arrive.
        RETURN_IF_ERROR(loop.WaitUntil([&] { return straggler_done.load(); },
                                       absl::Now() + absl::Seconds(30),
                                       [] { return std::string("the straggler"); }));
        unchanged[rank] = std::all_of(data.begin(), data.end(), [](float x) { return x == -7.0f; });
        again[rank] = exchange->AllReduce(absl::MakeSpan(data), 1.0f);
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_THAT(calls[rank], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                      AllOf(HasSubstr("timed out"),
                                            HasSubstr("compressed all-reduce call 0"))));
    EXPECT_TRUE(unchanged[rank]) << "a late message reached the caller's tensor";
    EXPECT_THAT(again[rank],
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
  }
  // An abandoned send still goes out whole (the links stay in step): the
  // straggler's call completes, with every member's message.
  EXPECT_OK(calls[2]);
}

}  // namespace
}  // namespace rdmaflow::compression
