#include "bench/pingpong.h"

#include <string>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/in_memory_store.h"

namespace rdmaflow::bench {
namespace {

// Runs the ping-pong with `options` on two loopback ranks (rank 1 on a
// thread) and returns rank 0's rows, after checking that rank 1 succeeded
// with none.
absl::StatusOr<std::vector<PingPongRow>> RunTwoRanks(
    const PingPongOptions& options) {
  rdma::testing::InMemoryStore store;
  auto fabric = rdma::loopback::LoopbackFabric::Create();
  ASSIGN_OR_RETURN(auto a,
                   rdma::loopback::LoopbackTransport::Create({0, fabric}));
  ASSIGN_OR_RETURN(auto b,
                   rdma::loopback::LoopbackTransport::Create({1, fabric}));
  absl::StatusOr<std::vector<PingPongRow>> peer_rows;
  std::thread peer([&] { peer_rows = RunPingPong(*b, store, options); });
  absl::StatusOr<std::vector<PingPongRow>> rows =
      RunPingPong(*a, store, options);
  peer.join();
  RETURN_IF_ERROR(peer_rows.status());
  if (!peer_rows->empty()) {
    return absl::InternalError("rank 1 returned rows; only rank 0 reports");
  }
  return rows;
}

TEST(PingPongTest, ProducesOneRowPerOpAndSizeOnRankZero) {
  PingPongOptions options;
  options.min_bytes = 8;
  options.max_bytes = 4096;
  options.byte_budget = 1 << 16;
  options.max_iters = 50;
  ASSERT_OK_AND_ASSIGN(std::vector<PingPongRow> rows, RunTwoRanks(options));
  ASSERT_EQ(rows.size(), 2u * 10);  // 8..4096: 10 sizes, write and read.
  for (const PingPongRow& row : rows) {
    EXPECT_GT(row.bw_avg_mbps(), 0) << row.op() << " " << row.bytes();
    EXPECT_GE(row.bw_peak_mbps(), row.bw_avg_mbps() * 0.999);
    EXPECT_LE(row.lat_min_us(), row.lat_p50_us());
    EXPECT_LE(row.lat_p50_us(), row.lat_p99_us());
    EXPECT_GT(row.memcpy_mbps(), 0);
  }
}

TEST(PingPongTest, MeasuresReadsAloneWithoutWrites) {
  PingPongOptions options;
  options.min_bytes = 8;
  options.max_bytes = 64;
  options.byte_budget = 1 << 12;
  options.max_iters = 20;
  options.writes = false;
  ASSERT_OK_AND_ASSIGN(std::vector<PingPongRow> rows, RunTwoRanks(options));
  ASSERT_EQ(rows.size(), 4u);  // 8..64: 4 sizes, reads only.
  for (const PingPongRow& row : rows) {
    EXPECT_EQ(row.op(), "read");
    EXPECT_GT(row.bw_avg_mbps(), 0) << row.bytes();
    EXPECT_GT(row.lat_p50_us(), 0) << row.bytes();
  }
}

// --owner_busy_ms: read rows only carry the reads timed with their owner
// computing. Loopback reads need no one's progress, so the owner's compute
// (half a second) does not hold them.
TEST(PingPongTest, TimesReadsWithTheirOwnerBusy) {
  PingPongOptions options;
  options.min_bytes = 64;
  options.max_bytes = 64;
  options.byte_budget = 1 << 12;
  options.max_iters = 20;
  options.owner_busy = absl::Milliseconds(500);
  ASSERT_OK_AND_ASSIGN(std::vector<PingPongRow> rows, RunTwoRanks(options));
  ASSERT_EQ(rows.size(), 2u);
  for (const PingPongRow& row : rows) {
    if (row.op() == "write") {
      EXPECT_EQ(row.owner_busy_ms(), 0);
      EXPECT_EQ(row.busy_read_p50_us(), 0);
      continue;
    }
    EXPECT_EQ(row.owner_busy_ms(), 500);
    EXPECT_GT(row.busy_read_p50_us(), 0);
    EXPECT_LT(row.busy_read_p50_us(), 500e3);
  }
}

// A sweep of 8 to `max_bytes` with few iterations, ended by a deadline a
// minute away rather than hanging.
PingPongOptions ShortSweep(size_t max_bytes, size_t byte_budget) {
  PingPongOptions options;
  options.min_bytes = 8;
  options.max_bytes = max_bytes;
  options.byte_budget = byte_budget;
  options.max_iters = 30;
  options.timeout = absl::Seconds(60);
  return options;
}

// Runs two ranks with `options` and expects `count` rows of `op`, each
// with a latency and a bandwidth measured.
void ExpectMeasured(const PingPongOptions& options, size_t count, const std::string& op) {
  ASSERT_OK_AND_ASSIGN(std::vector<PingPongRow> rows, RunTwoRanks(options));
  ASSERT_EQ(rows.size(), count);
  for (const PingPongRow& row : rows) {
    EXPECT_EQ(row.op(), op);
    EXPECT_GT(row.lat_p50_us(), 0) << row.bytes();
    EXPECT_GT(row.bw_avg_mbps(), 0) << row.bytes();
  }
}

TEST(PingPongTest, SignalsWithFlagWordsBehindTheData) {
  PingPongOptions options = ShortSweep(4096, 1 << 14);
  options.reads = false;
  // Each wait polls its own memory for the peer's next flag: a flag that
  // never lands (or lands where the waiter does not look) ends in the
  // deadline, not in rows. Bound (inline where the backend writes at once,
  // else with a completion: loopback's), bound with a completion each, and
  // unbound.
  for (const PingPongOptions::Signal signal :
       {PingPongOptions::Signal::kFlagWord, PingPongOptions::Signal::kFlagWordSignalled,
        PingPongOptions::Signal::kFlagWordUnbound}) {
    SCOPED_TRACE(static_cast<int>(signal));
    options.signal = signal;
    ExpectMeasured(options, 10, "write");  // 8..4096, writes only
  }
}

TEST(PingPongTest, ReadsPostedBoundAndInline) {
  PingPongOptions options = ShortSweep(64, 1 << 12);
  options.writes = false;
  for (const PingPongOptions::ReadPost post :
       {PingPongOptions::ReadPost::kPosted, PingPongOptions::ReadPost::kBound,
        PingPongOptions::ReadPost::kInline}) {
    SCOPED_TRACE(static_cast<int>(post));
    options.read_post = post;
    ExpectMeasured(options, 4, "read");  // 8..64, reads only
  }
}

TEST(PingPongTest, RejectsNothingToMeasure) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto a,
                       rdma::loopback::LoopbackTransport::Create(
                           {0, rdma::loopback::LoopbackFabric::Create()}));
  PingPongOptions options;
  options.writes = false;
  options.reads = false;
  EXPECT_THAT(RunPingPong(*a, store, options),
              rdmaflow::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PingPongTest, RejectsAnEmptySizeRange) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto a,
                       rdma::loopback::LoopbackTransport::Create(
                           {0, rdma::loopback::LoopbackFabric::Create()}));
  PingPongOptions options;
  options.min_bytes = 64;
  options.max_bytes = 8;
  EXPECT_THAT(RunPingPong(*a, store, options),
              rdmaflow::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PercentileTest, PicksTheRankedSample) {
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 0), 1);
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 100), 5);
}

}  // namespace
}  // namespace rdmaflow::bench
