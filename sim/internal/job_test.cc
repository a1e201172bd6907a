// File: job_test.cc
// The simulator's shared job over a link whose one-sided operations are
// emulated (UCX over TCP): what a notified write, a put and a read wait
// for, and the CPU that polling ranks take from compute.
#include "sim/internal/job.h"

#include <vector>

#include "gtest/gtest.h"
#include "sim/internal/test_hosts.h"

namespace rdmaflow::sim::internal {
namespace {

Scenario ThreeHosts(bool emulated) { return SlowLinkHosts(3, emulated); }

constexpr double kMs = 1e-3;

// One-sided: the write is done when its last byte arrives, whatever the
// writer does next.
TEST(JobWriteTest, OneSidedLandsWhenItsBytesArrive) {
  Job job(ThreeHosts(false), Costs{});
  double landed = -1;
  job.Write(0, 1, 1000, [&] { landed = job.now(); });
  job.Compute(0, 50 * kMs, [] {});
  job.loop().Run();
  EXPECT_NEAR(landed, 1 * kMs + 10e-6, 1e-9);
}

// Emulated, both ranks idle: the data (1 ms and the latency), the flush's
// answer back (the latency), the flag (the latency).
TEST(JobWriteTest, EmulatedIdleTakesTheDataThenTwoMoreCrossings) {
  Job job(ThreeHosts(true), Costs{});
  double landed = -1;
  job.Write(0, 1, 1000, [&] { landed = job.now(); });
  job.loop().Run();
  EXPECT_NEAR(landed, 1 * kMs + 3 * 10e-6, 1e-9);
}

// Emulated, the target computing: its progress places the data and
// answers the flush only when its compute ends.
TEST(JobWriteTest, EmulatedWaitsForTheTargetsProgress) {
  Job job(ThreeHosts(true), Costs{});
  double landed = -1;
  job.Compute(1, 20 * kMs, [] {});
  job.Write(0, 1, 1000, [&] { landed = job.now(); });
  job.loop().Run();
  EXPECT_NEAR(landed, 20 * kMs + 2 * 10e-6, 1e-9);
}

// A write without a notification (flushed by its writer, as gossip's push
// does) lands once its bytes are there and the target progresses; the
// writer's compute does not hold it.
TEST(JobWriteTest, APutNeedsOnlyTheTargetsProgress) {
  for (const bool emulated : {false, true}) {
    Job job(ThreeHosts(emulated), Costs{});
    double landed = -1;
    job.Put(0, 1, 1000, [&] { landed = job.now(); });
    job.Compute(0, 50 * kMs, [] {});
    job.loop().Run();
    EXPECT_NEAR(landed, 1 * kMs + 10e-6, 1e-9) << (emulated ? "emulated" : "one-sided");
  }
}

// Emulated: the data crosses, the target answers the flush, and only the
// writer's progress sends the flag: a writer that computes right after
// posting holds its notification until its compute ends.
TEST(JobWriteTest, EmulatedWaitsForTheWritersProgress) {
  Job job(ThreeHosts(true), Costs{});
  double landed = -1;
  job.Write(0, 1, 1000, [&] { landed = job.now(); });
  job.Compute(0, 50 * kMs, [] {});
  job.loop().Run();
  // The compute ends at 50 ms; the flag then takes the latency.
  EXPECT_NEAR(landed, 50 * kMs + 10e-6, 1e-9);
}

// The writer's progress is its next post: the flag goes behind that post's
// data to the same peer (their connection), not behind its data to another
// peer (the model's choice: UCX over TCP has a connection a peer).
TEST(JobWriteTest, EmulatedFlagFollowsTheNextPostToThatPeerOnly) {
  for (int next_peer : {1, 2}) {
    Job job(ThreeHosts(true), Costs{});
    double landed = -1;
    job.Write(0, 1, 1000, [&] { landed = job.now(); });
    job.Compute(0, 50 * kMs, [&] { job.Write(0, next_peer, 20000, [] {}); });
    job.loop().Run();
    if (next_peer == 1) {
      // 20 000 bytes from 50 ms: they arrive at 70 ms + latency; the flag
      // right behind them.
      EXPECT_NEAR(landed, 70 * kMs + 10e-6, 1e-9) << "next post to the same peer";
    } else {
      EXPECT_NEAR(landed, 50 * kMs + 10e-6, 1e-9) << "next post to another peer";
    }
  }
}

// Where ranks outnumber cores, a rank that polls takes wait_cpu of a core
// from the others' compute, and moving_cpu while data it sends or receives
// moves (its progress then never sleeps); once the data has landed, or
// without a measured moving_cpu, wait_cpu again.
TEST(JobCpuTest, RanksMovingDataTakeMoreCpuFromComputeThanWaitingOnes) {
  struct Case {
    double moving_cpu;
    double transfer_bytes;  // 0: none; 100000: 100 ms, moving during the compute
    bool after_landing;     // the compute starts 1 ms after the data landed
    double compute_ms;      // rank 2's 10 ms, slowed by ranks 0 and 1
  };
  for (const Case& c : std::vector<Case>{{0.6, 100000, false, 10 * (1 + 0.6 + 0.6)},
                                         {0.6, 0, false, 10 * (1 + 0.1 + 0.1)},
                                         {0, 100000, false, 10 * (1 + 0.1 + 0.1)},
                                         {0.6, 1000, true, 10 * (1 + 0.1 + 0.1)}}) {
    Scenario s = ThreeHosts(true);
    s.shared_cores = 1;  // 3 ranks on one core
    s.network.set_wait_cpu(0.1);
    s.network.set_moving_cpu(c.moving_cpu);
    s.local = s.network;
    Job job(s, Costs{});
    double start = -1, end = -1;
    auto compute = [&] {
      job.loop().After(1 * kMs, [&] {
        start = job.now();
        job.Compute(2, 10 * kMs, [&] { end = job.now(); });
      });
    };
    // Ranks 0 and 1 compute nothing, then wait (poll); rank 0 then writes
    // to rank 1, and rank 2 computes while the data moves, or once it
    // landed.
    job.Work(0, 0, [] {});
    job.Work(1, 0, [&] {
      if (c.transfer_bytes > 0) {
        job.Put(0, 1, c.transfer_bytes, [&] {
          if (c.after_landing) compute();
        });
      }
      if (!c.after_landing) compute();
    });
    job.loop().Run();
    EXPECT_NEAR((end - start) / kMs, c.compute_ms, 1e-6)
        << "moving_cpu " << c.moving_cpu << ", " << c.transfer_bytes << " bytes"
        << (c.after_landing ? ", landed" : "");
  }
}

// A read over an emulated link, its owner idle when the request arrives
// and computing from 1 ms to 51 ms. Unmeasured (unattended_bytes 0), the
// whole answer crosses, then its end waits for the owner's next progress;
// measured, the owner's socket carries that many bytes on alone and the
// rest waits for the owner.
TEST(JobReadTest, AnOwnersSocketCarriesUnattendedBytesWhileItComputes) {
  struct Case {
    double unattended_bytes;
    double done_ms;
  };
  // 5000 bytes at a byte a microsecond, 10 us of latency each way.
  for (const Case& c : std::vector<Case>{
           // Crossed by 5.02 ms; ended with the compute.
           {0, 51},
           // 2000 bytes by 2.02 ms; 2000 more from 51 ms; the last 1000
           // right behind them (the owner progresses again).
           {2000, 51 + 2.01 + 1.01},
           // The socket takes all of it: the compute holds nothing.
           {10000, 5.02}}) {
    Scenario s = ThreeHosts(true);
    s.network.set_unattended_bytes(c.unattended_bytes);
    s.local = s.network;
    Job job(s, Costs{});
    double done = -1;
    job.Read(0, 1, 5000, [&] { done = job.now(); });
    job.loop().After(1 * kMs, [&] { job.Compute(1, 50 * kMs, [] {}); });
    job.loop().Run();
    EXPECT_NEAR(done / kMs, c.done_ms, 1e-6) << "unattended_bytes " << c.unattended_bytes;
  }
}

}  // namespace
}  // namespace rdmaflow::sim::internal
