// File: calibration_test.cc
#include "sim/calibration.h"

#include <cmath>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/link_presets.h"
#include "sim/scenario.h"

namespace rdmaflow::sim {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

results::PingPongRow* Row(results::BenchmarkReport& r, const char* op, double bytes,
                          double mbps, double p50_us, double mops) {
  results::PingPongRow* row = r.mutable_pingpong()->add_rows();
  row->set_op(op);
  row->set_bytes(bytes);
  row->set_bw_avg_mbps(mbps);
  row->set_lat_p50_us(p50_us);
  row->set_msg_rate_mops(mops);
  row->set_memcpy_mbps(bytes * 2);
  return row;
}

TEST(CalibrationTest, ALinkFromThePingPong) {
  results::BenchmarkReport report;
  report.mutable_run()->set_transport("ucx");
  report.mutable_run()->set_params("tls=tcp");
  Row(report, "write", 8, 1.6, 25, 0.2);        // 5 us a message
  Row(report, "write", 1 << 20, 110, 9000, 1e-4);
  Row(report, "write", 4 << 20, 100, 40000, 2e-5);
  Row(report, "read", 8, 999, 1, 9);             // reads are not used
  ASSERT_OK_AND_ASSIGN(LinkProfile link, LinkFromPingPong("1gbit", report, "a.json"));
  EXPECT_EQ(link.name(), "1gbit");
  EXPECT_DOUBLE_EQ(link.latency_us(), 25);
  // The largest write's bandwidth, not the best (a cache or burst effect).
  EXPECT_DOUBLE_EQ(link.bandwidth_gbps(), 0.1);
  // 5 us a message less 8 bytes at 100 MB/s.
  EXPECT_NEAR(link.per_message_us(), 5 - 8 / 100.0, 1e-9);
  EXPECT_THAT(link.source(), HasSubstr("tls=tcp"));
  EXPECT_DOUBLE_EQ(MemcpyFromPingPong(report), 2.0 * (4 << 20) / 1000);
  // UCX emulates put and get over TCP; not over shared memory.
  EXPECT_TRUE(link.needs_target_progress());
  report.mutable_run()->set_params("tls=shm");
  ASSERT_OK_AND_ASSIGN(link, LinkFromPingPong("shm", report, "s.json"));
  EXPECT_FALSE(link.needs_target_progress());
}

TEST(CalibrationTest, BadReportsAreNamed) {
  results::BenchmarkReport empty;
  EXPECT_THAT(LinkFromPingPong("x", empty, "e.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("e.json")));
  results::BenchmarkReport zero;
  Row(zero, "write", 8, 0, 1, 1);
  EXPECT_THAT(LinkFromPingPong("x", zero, "z.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8 bytes")));
}

// A ring of namespace hosts sharing the cores: rdmaflow's ring row of the
// largest size; other implementations, algorithms and sizes are not it.
TEST(CalibrationTest, SharedRingIsTheLargestRingRow) {
  auto add = [](results::BenchmarkReport& report, const std::string& impl,
                const std::string& algorithm, double bytes, int ranks, double busbw) {
    results::AllReduceRow* row = report.mutable_allreduce()->add_rows();
    row->set_impl(impl);
    row->set_algorithm(algorithm);
    row->set_bytes(bytes);
    row->set_ranks(ranks);
    row->set_busbw_gbps(busbw);
  };
  results::BenchmarkReport report;
  EXPECT_THAT(SharedRingFromAllReduce(report, "r.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("r.json")));
  add(report, "rdmaflow", "ring", 4 << 20, 4, 0.049);
  add(report, "rdmaflow", "ring", 16 << 20, 4, 0.065);
  add(report, "gloo", "", 64 << 20, 4, 0.2);
  add(report, "rdmaflow", "host-scatter-gather", 64 << 20, 4, 3.0);
  ASSERT_OK_AND_ASSIGN(auto ring, SharedRingFromAllReduce(report, "r.json"));
  EXPECT_DOUBLE_EQ(ring.first, 0.065);
  EXPECT_EQ(ring.second, 4);
  // A largest ring row without a usable figure is refused, not skipped.
  for (const auto& [ranks, busbw] : std::vector<std::pair<int, double>>{
           {4, std::nan("")}, {4, 0.0}, {4, -1.0}, {1, 0.065}}) {
    results::BenchmarkReport bad = report;
    add(bad, "rdmaflow", "ring", 32 << 20, ranks, busbw);
    EXPECT_THAT(SharedRingFromAllReduce(bad, "r.json"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bus bandwidth")))
        << ranks << " ranks, " << busbw << " GB/s";
  }
}

// A read of B bytes taking t idle and t_busy with its owner computing T:
// the owner's socket carried B x (1 - (t_busy - T) / t) on alone.
TEST(CalibrationTest, UnattendedBytesFromReadsWithTheirOwnerBusy) {
  auto busy = [](results::BenchmarkReport& report, double bytes, double idle_us,
                 double busy_ms, double read_us) {
    results::PingPongRow* row = Row(report, "read", bytes, 100, idle_us, 1e-5);
    row->set_owner_busy_ms(busy_ms);
    row->set_busy_read_p50_us(read_us);
  };
  results::BenchmarkReport report;
  Row(report, "read", 8 << 20, 100, 80000, 1e-5);  // not timed busy
  EXPECT_THAT(UnattendedBytesFromPingPong(report, "b.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("b.json"), HasSubstr("--owner_busy_ms"))));
  // 4 MB: 40 ms idle; 430 ms with the owner busy 400 ms: 30 of the 40 ms
  // waited, a quarter crossed alone. The largest row is the one used.
  busy(report, 1e6, 10000, 400, 400500);
  busy(report, 4e6, 40000, 400, 430000);
  ASSERT_OK_AND_ASSIGN(double bytes, UnattendedBytesFromPingPong(report, "b.json"));
  EXPECT_NEAR(bytes, 1e6, 1e-3);
  // Not delayed at all: everything crossed (a lower bound); delayed longer
  // than the idle read: nothing but a page did (0 would read as "not
  // measured").
  for (const auto& [read_us, expected] : std::vector<std::pair<double, double>>{
           {120000, 8e6}, {600000, kMinUnattendedBytes}}) {
    results::BenchmarkReport one;
    busy(one, 8e6, 80000, 400, read_us);
    ASSERT_OK_AND_ASSIGN(bytes, UnattendedBytesFromPingPong(one, "b.json"));
    EXPECT_DOUBLE_EQ(bytes, expected) << read_us << " us";
  }
  // A read under a page cannot say it moved less than one.
  results::BenchmarkReport tiny;
  busy(tiny, 1024, 50, 400, 400100);
  EXPECT_THAT(UnattendedBytesFromPingPong(tiny, "b.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("b.json"), HasSubstr("under a page"))));
  for (const double bad : {0.0, -1.0, std::nan("")}) {
    results::BenchmarkReport one;
    busy(one, 8e6, 80000, 400, bad);
    EXPECT_THAT(UnattendedBytesFromPingPong(one, "b.json"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("b.json")))
        << bad;
  }
}

TEST(CalibrationTest, ModelsAndLinksByName) {
  Calibration c;
  c.add_models()->set_model("vgg");
  LinkProfile* shm = c.add_links();
  shm->set_name("shm");
  shm->set_bandwidth_gbps(42);
  ASSERT_OK_AND_ASSIGN(ModelProfile m, FindModel(c, "vgg"));
  EXPECT_EQ(m.model(), "vgg");
  EXPECT_THAT(FindModel(c, "bert"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("vgg")));
  // Measured links replace presets of the same name; presets fill in.
  ASSERT_OK_AND_ASSIGN(LinkProfile l, FindLink(c, "shm"));
  EXPECT_DOUBLE_EQ(l.bandwidth_gbps(), 42);
  ASSERT_OK_AND_ASSIGN(LinkProfile ib, FindLink(c, "ib_hdr200"));
  EXPECT_GT(ib.bandwidth_gbps(), 20);
  // Over TCP our one-sided operations are emulated; over RDMA they are not.
  EXPECT_FALSE(ib.needs_target_progress());
  ASSERT_OK_AND_ASSIGN(LinkProfile ethernet, FindLink(c, "10gbit"));
  EXPECT_TRUE(ethernet.needs_target_progress());
  EXPECT_THAT(FindLink(c, "carrier_pigeon"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ib_hdr200")));
  EXPECT_EQ(HostOf(c).cores(), 2);
}

TEST(CalibrationTest, FasterComputeDividesTimesNotBytes) {
  ModelProfile m;
  m.set_step_ms(100);
  m.set_optimizer_ms(10);
  m.set_loss_ms(4);
  LayerProfile* l = m.add_layers();
  l->set_forward_ms(30);
  l->set_backward_ms(60);
  l->set_param_bytes(1e6);
  l->set_output_bytes(1e3);
  ASSERT_OK_AND_ASSIGN(ModelProfile f, FasterCompute(m, 20));
  EXPECT_DOUBLE_EQ(f.step_ms(), 5);
  EXPECT_DOUBLE_EQ(f.optimizer_ms(), 0.5);
  EXPECT_DOUBLE_EQ(f.loss_ms(), 0.2);
  EXPECT_DOUBLE_EQ(f.layers(0).forward_ms(), 1.5);
  EXPECT_DOUBLE_EQ(f.layers(0).backward_ms(), 3);
  EXPECT_DOUBLE_EQ(f.layers(0).param_bytes(), 1e6);
  EXPECT_DOUBLE_EQ(f.layers(0).output_bytes(), 1e3);
  for (double bad : {0.0, -1.0, 1e5, std::nan("")}) {
    EXPECT_THAT(FasterCompute(m, bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("speedup")));
  }
}

TEST(CalibrationTest, TimeSharingFromCopiesRunAtOnce) {
  ModelProfile alone;
  alone.set_model("lenet5");
  alone.set_batch_size(64);
  alone.set_step_ms(7);
  std::vector<ModelProfile> copies(4, alone);
  copies[0].set_step_ms(30);
  copies[1].set_step_ms(31);
  copies[2].set_step_ms(29);
  copies[3].set_step_ms(30);
  // 4 ranks a core: 4 x 7 ms ideally, 30 ms measured.
  ASSERT_OK_AND_ASSIGN(TimeSharing t, TimeSharingFromProfiles(4, alone, copies, "t"));
  EXPECT_DOUBLE_EQ(t.ranks_per_core(), 4);
  EXPECT_NEAR(t.slowdown(), 30.0 / 28, 1e-12);
  // Faster than ideal is noise: no slowdown.
  for (ModelProfile& c : copies) c.set_step_ms(13);
  ASSERT_OK_AND_ASSIGN(t, TimeSharingFromProfiles(2, alone, copies, "t"));
  EXPECT_DOUBLE_EQ(t.slowdown(), 1);

  EXPECT_THAT(TimeSharingFromProfiles(1, alone, copies, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("above one rank")));
  EXPECT_THAT(TimeSharingFromProfiles(2, alone, {}, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no profiles")));
  for (ModelProfile& c : copies) c.set_step_ms(7 * 2 * 200);
  EXPECT_THAT(TimeSharingFromProfiles(2, alone, copies, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("something else")));
  copies[2].set_model("vgg");
  EXPECT_THAT(TimeSharingFromProfiles(2, alone, copies, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'vgg'")));
  copies[2] = alone;
  copies[2].set_step_ms(-1);
  EXPECT_THAT(TimeSharingFromProfiles(2, alone, copies, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positive")));
  alone.set_step_ms(0);
  EXPECT_THAT(TimeSharingFromProfiles(2, alone, copies, "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("whole-step")));
}

}  // namespace
}  // namespace rdmaflow::sim
