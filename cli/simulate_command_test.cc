// File: simulate_command_test.cc
// `rdmaflow calibrate` from measurement files, then `rdmaflow simulate` on
// the calibration: the table, the JSON, and the errors a user meets.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/calibrate_command.h"
#include "cli/simulate_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "sim/sim.pb.h"

namespace rdmaflow::cli {
namespace {

using ::testing::HasSubstr;

std::string Tmp(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

void Write(const google::protobuf::Message& m, const std::string& path) {
  ASSERT_TRUE(results::WriteJsonFile(m, path).ok());
}

void Read(const std::string& path, google::protobuf::Message* m) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(results::FromJson(text.str(), m).ok()) << path;
}

struct Outcome {
  int code;
  std::string out, err;
};

template <typename Fn>
Outcome Call(Fn fn, std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = fn(args, out, err);
  return {code, out.str(), err.str()};
}

class SimulateCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    results::BenchmarkReport pp;
    pp.mutable_run()->set_transport("ucx");
    results::PingPongRow* row = pp.mutable_pingpong()->add_rows();
    row->set_op("write");
    row->set_bytes(8);
    row->set_bw_avg_mbps(8);
    row->set_lat_p50_us(0.6);
    row->set_msg_rate_mops(1);
    row->set_memcpy_mbps(9000);
    Write(pp, Tmp("pp_shm.json"));
    row->set_lat_p50_us(30);
    row->set_bytes(1 << 20);
    row->set_bw_avg_mbps(110);
    row->set_msg_rate_mops(1e-4);
    Write(pp, Tmp("pp_1g.json"));

    sim::ModelProfile model;
    model.set_model("tiny");
    model.set_batch_size(32);
    for (bool head : {false, true}) {
      sim::LayerProfile* l = model.add_layers();
      l->set_name(head ? "fc" : "conv");
      l->set_head(head);
      l->set_forward_ms(1);
      l->set_backward_ms(2);
      l->set_param_bytes(head ? 4e6 : 1e5);
      l->set_output_bytes(1e4);
    }
    Write(model, Tmp("tiny.json"));
  }

  Outcome Calibrate() {
    return Call(RunCalibrateCommand,
                {"--links", "shm=" + Tmp("pp_shm.json") + ",1gbit=" + Tmp("pp_1g.json"),
                 "--profiles", Tmp("tiny.json"), "--cores", "2", "--out",
                 Tmp("calibration.json")});
  }
};

TEST_F(SimulateCommandTest, CalibrateThenSimulate) {
  Outcome c = Calibrate();
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("link 1gbit: latency 30 us"));
  EXPECT_THAT(c.out, HasSubstr("memcpy 9 GB/s"));

  Outcome s = Call(RunSimulateCommand,
               {"--calibration", Tmp("calibration.json"), "--model", "tiny", "--strategy",
                "ps:servers=1,sync=ssp:2;allreduce", "--ranks", "2,8", "--link",
                "1gbit,ib_hdr200", "--steps", "5", "--json", Tmp("sim.json")});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("servers=1,sync=ssp:2"));
  EXPECT_THAT(s.out, HasSubstr("ib_hdr200"));
  sim::SimulationReport report;
  ASSERT_NO_FATAL_FAILURE(Read(Tmp("sim.json"), &report));
  ASSERT_EQ(report.runs_size(), 2 * 2 * 2);
  // 1 Gbit/s moves 8 ranks' gradients slower than HDR InfiniBand.
  double gbit = 0, ib = 0;
  for (const sim::SimulatedRun& run : report.runs()) {
    if (run.strategy() == "allreduce" && run.ranks() == 8) {
      (run.link() == "1gbit" ? gbit : ib) = run.step_ms();
    }
  }
  EXPECT_GT(gbit, ib);
  EXPECT_GT(ib, 0);
}

// A convergence file adds the time to accuracy to the rows whose model and
// update rule it measured (allreduce: "sgd"), and only to those.
TEST_F(SimulateCommandTest, ConvergenceGivesTimeToAccuracy) {
  ASSERT_EQ(Calibrate().code, 0);
  sim::Convergence convergence;
  convergence.set_model("tiny");
  convergence.set_target(0.8);
  sim::ConvergencePoint* point = convergence.add_points();
  point->set_spec("allreduce");
  point->set_update_rule("sgd");
  point->set_ranks(2);
  point->set_workers(2);
  point->set_steps_run(400);
  point->set_steps_to_target(250);
  Write(convergence, Tmp("convergence.json"));
  Outcome s = Call(RunSimulateCommand,
                   {"--calibration", Tmp("calibration.json"), "--convergence",
                    Tmp("convergence.json"), "--model", "tiny", "--strategy",
                    "allreduce;ps:servers=1,sync=ssp:2", "--ranks", "2,8", "--steps", "5",
                    "--json", Tmp("acc.json")});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("to_acc_s"));
  EXPECT_THAT(s.out, HasSubstr("80 % test accuracy"));
  sim::SimulationReport report;
  ASSERT_NO_FATAL_FAILURE(Read(Tmp("acc.json"), &report));
  ASSERT_EQ(report.runs_size(), 4);
  for (const sim::SimulatedRun& run : report.runs()) {
    SCOPED_TRACE(run.strategy() + " " + std::to_string(run.ranks()));
    if (run.strategy() == "allreduce") {
      EXPECT_EQ(run.update_rule(), "sgd");
      EXPECT_EQ(run.workers(), run.ranks());
      EXPECT_EQ(run.steps_to_target(), 250);
      EXPECT_DOUBLE_EQ(run.time_to_accuracy_s(), 250 * run.step_ms() * 1e-3);
    } else {
      EXPECT_EQ(run.update_rule(), "ps:ssp:2");
      EXPECT_EQ(run.workers(), run.ranks() - 1);
      EXPECT_EQ(run.time_to_accuracy_s(), 0);
    }
  }
  // A point it cannot use is named; so is a missing file.
  point->set_steps_to_target(401);
  Write(convergence, Tmp("bad_convergence.json"));
  Outcome bad = Call(RunSimulateCommand, {"--calibration", Tmp("calibration.json"),
                                          "--convergence", Tmp("bad_convergence.json"),
                                          "--model", "tiny"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("convergence point 0"));
  bad = Call(RunSimulateCommand, {"--calibration", Tmp("calibration.json"), "--convergence",
                                  Tmp("nowhere.json"), "--model", "tiny"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("nowhere.json"));
  Outcome none = Call(RunSimulateCommand, {"--calibration", Tmp("calibration.json"),
                                           "--convergence", "none", "--model", "tiny"});
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_THAT(none.out, ::testing::Not(HasSubstr("test accuracy")));
  // A convergence file beside a calibration given on the command line is
  // not read unless named: only the default calibration brings its own.
  Outcome explicit_calibration =
      Call(RunSimulateCommand, {"--calibration", Tmp("calibration.json"), "--model", "tiny",
                                "--strategy", "allreduce", "--ranks", "2", "--steps", "5"});
  EXPECT_EQ(explicit_calibration.code, 0) << explicit_calibration.err;
  EXPECT_THAT(explicit_calibration.out, ::testing::Not(HasSubstr("test accuracy")));
}

// A ring measured across namespace hosts sharing the cores caps the 1gbit
// link's rings there; a link the calibration does not measure is refused.
TEST_F(SimulateCommandTest, CalibrateTakesASharedRing) {
  results::BenchmarkReport ring;
  results::AllReduceRow* row = ring.mutable_allreduce()->add_rows();
  row->set_impl("rdmaflow");
  row->set_algorithm("ring");
  row->set_bytes(16 << 20);
  row->set_ranks(4);
  row->set_busbw_gbps(0.05);
  Write(ring, Tmp("ring_1g.json"));
  const std::vector<std::string> base = {
      "--links", "shm=" + Tmp("pp_shm.json") + ",1gbit=" + Tmp("pp_1g.json"), "--profiles",
      Tmp("tiny.json"), "--cores", "2", "--out", Tmp("ring_calibration.json")};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--shared_ring", "1gbit=" + Tmp("ring_1g.json")});
  Outcome c = Call(RunCalibrateCommand, args);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("a ring of 4 ranks sharing the cores moves 0.05 GB/s"));
  sim::Calibration calibration;
  ASSERT_NO_FATAL_FAILURE(Read(Tmp("ring_calibration.json"), &calibration));
  bool found = false;
  for (const sim::LinkProfile& link : calibration.links()) {
    if (link.name() != "1gbit") continue;
    found = true;
    EXPECT_DOUBLE_EQ(link.shared_ring_gbps(), 0.05);
    EXPECT_EQ(link.shared_ring_ranks(), 4);
  }
  EXPECT_TRUE(found);
  args = base;
  args.insert(args.end(), {"--shared_ring", "10gbit=" + Tmp("ring_1g.json")});
  c = Call(RunCalibrateCommand, args);
  EXPECT_EQ(c.code, 1);
  EXPECT_THAT(c.err, HasSubstr("'10gbit'"));
}

// A link's CPU shares: waiting, and moving data; each only for a link
// --links measures.
TEST_F(SimulateCommandTest, CalibrateTakesTheCpuAWaitingAndAMovingRankUse) {
  std::vector<std::string> args = {
      "--links", "shm=" + Tmp("pp_shm.json") + ",1gbit=" + Tmp("pp_1g.json"), "--profiles",
      Tmp("tiny.json"), "--cores", "2", "--out", Tmp("cpu_calibration.json"),
      "--wait_cpu", "1gbit=0.2", "--moving_cpu", "1gbit=0.9"};
  Outcome c = Call(RunCalibrateCommand, args);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("a rank moving data uses 0.9 of a core"));
  sim::Calibration calibration;
  ASSERT_NO_FATAL_FAILURE(Read(Tmp("cpu_calibration.json"), &calibration));
  int found = 0;
  for (const sim::LinkProfile& link : calibration.links()) {
    if (link.name() == "1gbit") {
      ++found;
      EXPECT_DOUBLE_EQ(link.wait_cpu(), 0.2);
      EXPECT_DOUBLE_EQ(link.moving_cpu(), 0.9);
    } else {
      EXPECT_EQ(link.moving_cpu(), 0) << link.name();
    }
  }
  EXPECT_EQ(found, 1);
  args.back() = "10gbit=0.9";
  c = Call(RunCalibrateCommand, args);
  EXPECT_EQ(c.code, 1);
  EXPECT_THAT(c.err, HasSubstr("--moving_cpu names link '10gbit'"));
}

// Reads timed with their owner busy give a link's unattended bytes; only
// for a link --links measures.
TEST_F(SimulateCommandTest, CalibrateTakesWhatABusyOwnersSocketCarries) {
  results::BenchmarkReport busy;
  results::PingPongRow* row = busy.mutable_pingpong()->add_rows();
  row->set_op("read");
  row->set_bytes(8e6);
  row->set_lat_p50_us(80000);
  row->set_owner_busy_ms(400);
  row->set_busy_read_p50_us(460000);  // 60 of 80 ms waited: 2 MB crossed alone
  Write(busy, Tmp("pp_busy_1g.json"));
  std::vector<std::string> args = {
      "--links", "shm=" + Tmp("pp_shm.json") + ",1gbit=" + Tmp("pp_1g.json"), "--profiles",
      Tmp("tiny.json"), "--cores", "2", "--out", Tmp("busy_calibration.json"),
      "--unattended", "1gbit=" + Tmp("pp_busy_1g.json")};
  Outcome c = Call(RunCalibrateCommand, args);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("a busy owner's socket carries 2e+06 bytes of a read on alone"));
  sim::Calibration calibration;
  ASSERT_NO_FATAL_FAILURE(Read(Tmp("busy_calibration.json"), &calibration));
  int found = 0;
  for (const sim::LinkProfile& link : calibration.links()) {
    if (link.name() == "1gbit") {
      ++found;
      EXPECT_NEAR(link.unattended_bytes(), 2e6, 1e-3);
    } else {
      EXPECT_EQ(link.unattended_bytes(), 0) << link.name();
    }
  }
  EXPECT_EQ(found, 1);
  args.back() = "10gbit=" + Tmp("pp_busy_1g.json");
  c = Call(RunCalibrateCommand, args);
  EXPECT_EQ(c.code, 1);
  EXPECT_THAT(c.err, HasSubstr("--unattended names link '10gbit'"));
  // A ping-pong without busy reads names the option that times them.
  args.back() = "1gbit=" + Tmp("pp_1g.json");
  c = Call(RunCalibrateCommand, args);
  EXPECT_EQ(c.code, 1);
  EXPECT_THAT(c.err, HasSubstr("--owner_busy_ms"));
}

TEST_F(SimulateCommandTest, ErrorsNameWhatToFix) {
  ASSERT_EQ(Calibrate().code, 0);
  const std::string cal = Tmp("calibration.json");
  Outcome r = Call(RunSimulateCommand, {"--calibration", cal, "--model", "bert"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("tiny"));
  r = Call(RunSimulateCommand, {"--calibration", cal, "--model", "tiny", "--ranks", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--ranks"));
  r = Call(RunSimulateCommand, {"--calibration", cal, "--model", "tiny", "--strategy", "nccl"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("known: ps"));
  r = Call(RunSimulateCommand,
           {"--calibration", cal, "--model", "tiny", "--strategy", "allreduce:servers=2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("servers"));
  r = Call(RunSimulateCommand, {"--calibration", Tmp("missing.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.json"));
  r = Call(RunSimulateCommand, {"--calibration", Tmp("pp_shm.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("rdmaflow.sim.Calibration"));
  r = Call(RunSimulateCommand, {"--bogus"});
  EXPECT_EQ(r.code, 2);
  r = Call(RunCalibrateCommand, {"--links", "shm=" + Tmp("tiny.json"), "--out", Tmp("x.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("tiny.json"));
  // The command line's own mistakes are usage errors, found before any file
  // is read (the links named here do not exist).
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--links", "shm=" + Tmp("absent.json")},
           {"--links", "shm=" + Tmp("absent.json"), "--out", Tmp("x.json"), "--cores", "0"},
           {"--links", "shm", "--out", Tmp("x.json")},
           {"--wait_cpu", "shm=2", "--out", Tmp("x.json")},
           {"--moving_cpu", "shm=-1", "--out", Tmp("x.json")},
           {"--shared_ring", "1gbit", "--out", Tmp("x.json")},
           {"--unattended", "1gbit", "--out", Tmp("x.json")},
           {"--time_sharing", "two=" + Tmp("absent.json"), "--out", Tmp("x.json")}}) {
    r = Call(RunCalibrateCommand, args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("(see rdmaflow calibrate --help)"));
    EXPECT_THAT(r.err, Not(HasSubstr("absent.json")));
  }
}

TEST_F(SimulateCommandTest, HelpDocumentsEveryOption) {
  Outcome r = Call(RunSimulateCommand, {"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--calibration", "--convergence", "--model", "--strategy", "--ranks", "--link",
                           "--ranks_per_host", "--cores", "--shared_cores", "--steps", "--slow_rank",
                           "--jitter", "--kill_rank", "--json", "--compute_speedup"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  r = Call(RunCalibrateCommand, {"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--links"));
}

}  // namespace
}  // namespace rdmaflow::cli
