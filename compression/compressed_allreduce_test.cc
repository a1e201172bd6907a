// File: compressed_allreduce_test.cc
// CompressedAllReduce over the loopback transport, ranks as threads: every
// codec's rounds over the real collectives decode what the in-memory
// exchange decodes, a group of some ranks gathers among itself, the wire
// carries less than the dense tensor, and misuse is a named error.
#include "compression/compressed_allreduce.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "compression/testing/local_exchange.h"
#include "gtest/gtest.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::compression {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kCount = 3000;
constexpr int kSteps = 4;

std::vector<float> Gradient(int rank, int step) {
  std::mt19937 gen(static_cast<uint32_t>(rank * 1000 + step));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(kCount);
  for (float& x : v) x = dist(gen);
  return v;
}

CompressedAllReduceOptions Options(const std::string& codec) {
  CompressedAllReduceOptions options;
  options.name = "test";
  options.codec = codec;
  options.seed = 7;
  options.group.ring.timeout = absl::Seconds(60);
  options.group.ring.chunk_bytes = 4096;
  return options;
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].ok()) << r << ": " << statuses[r];
}

// What the members should decode, step by step: the same codecs driven in
// memory (the all-reduces summed in another order: equal up to rounding).
std::vector<std::vector<float>> Expected(const std::string& codec, const std::vector<int>& members) {
  std::vector<std::unique_ptr<Codec>> codecs;
  std::vector<Codec*> raw;
  for (size_t m = 0; m < members.size(); ++m) {
    codecs.push_back(std::move(
        CreateCodec(codec, CodecContext{static_cast<int>(m), static_cast<int>(members.size()), 7},
                    kCount)
            .value()));
    raw.push_back(codecs.back().get());
  }
  std::vector<std::vector<float>> steps;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> gradients;
    for (int rank : members) gradients.push_back(Gradient(rank, step));
    testing::LocalExchangeOptions options;
    options.scale = 0.5f;
    steps.push_back(std::move(testing::RunLocalStep(raw, gradients, step, options).value()[0]));
  }
  return steps;
}

void RunCodec(const std::string& codec, int world, const std::vector<int>& members) {
  SCOPED_TRACE(codec);
  const std::vector<std::vector<float>> expected = Expected(codec, members);
  ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                        rdma::Store& store) -> absl::Status {
    if (std::find(members.begin(), members.end(), rank) == members.end()) {
      return absl::OkStatus();
    }
    onesided::ProgressLoop loop(transport, onesided::ProgressLoopOptions{});
    ASSIGN_OR_RETURN(auto exchange, CompressedAllReduce::Create(loop, store, "ns", members,
                                                                kCount, Options(codec)));
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> data = Gradient(rank, step);
      RETURN_IF_ERROR(exchange->AllReduce(absl::MakeSpan(data), 0.5f));
      for (size_t i = 0; i < kCount; ++i) {
        if (std::fabs(data[i] - expected[step][i]) > 1e-4f * (1 + std::fabs(expected[step][i]))) {
          return absl::InternalError(absl::StrCat("rank ", rank, " step ", step, " element ", i,
                                                  ": ", data[i], " vs ", expected[step][i]));
        }
      }
    }
    const CompressionStats stats = exchange->stats();
    EXPECT_EQ(stats.calls, kSteps);
    EXPECT_EQ(stats.dense_bytes, int64_t{kSteps} * kCount * 4);
    EXPECT_GT(stats.wire_bytes, 0);
    // A float32 all-reduce among threads takes the one-shot host path, each
    // member reading the others' ranges: (members - 1) x dense. The least
    // compressing codec (int8's 2-byte levels) halves that.
    EXPECT_LT(static_cast<double>(stats.wire_bytes),
              static_cast<double>(stats.dense_bytes) * (members.size() - 1) / 1.9);
    return exchange->Shutdown();
  }));
}

TEST(CompressedAllReduceTest, EveryCodecDecodesWhatTheInMemoryExchangeDecodes) {
  for (const char* codec : {"topk:ratio=0.02", "topk:ratio=0.02,sampled=1", "randomk:ratio=0.02",
                            "int8:bucket=128", "sketch:rows=3,cols=200,k=40"}) {
    RunCodec(codec, 3, {0, 1, 2});
  }
}

TEST(CompressedAllReduceTest, SomeRanksGatherAmongThemselves) {
  RunCodec("topk:ratio=0.05", 4, {3, 0, 2});
}

TEST(CompressedAllReduceTest, MisuseIsANamedError) {
  ExpectAllOk(RunRankThreads(1, [&](int, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    onesided::ProgressLoop loop(transport, onesided::ProgressLoopOptions{});
    EXPECT_THAT(CompressedAllReduce::Create(loop, store, "ns", {0}, kCount, Options("zip")),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown gradient codec")));
    EXPECT_THAT(CompressedAllReduce::Create(loop, store, "ns", {1}, kCount, Options("topk")),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a member")));
    ASSIGN_OR_RETURN(auto exchange,
                     CompressedAllReduce::Create(loop, store, "ns", {0}, kCount, Options("topk")));
    std::vector<float> short_data(10);
    EXPECT_THAT(exchange->AllReduce(absl::MakeSpan(short_data), 1.0f),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10 elements")));
    // One member: the codec's own message is the sum.
    std::vector<float> data = Gradient(0, 0);
    RETURN_IF_ERROR(exchange->AllReduce(absl::MakeSpan(data), 1.0f));
    int sent = 0;
    for (float x : data) sent += x != 0;
    EXPECT_EQ(sent, 30);
    return exchange->Shutdown();
  }));
}

}  // namespace
}  // namespace rdmaflow::compression
