// File: background_exchange_test.cc
// An exchange left running beside the next step (overlap=on): how long the
// rank serves its peers.
#include "sim/internal/background_exchange.h"

#include <functional>

#include "gtest/gtest.h"
#include "sim/internal/job.h"

namespace rdmaflow::sim::internal {
namespace {

constexpr double kMs = 1e-3;

// 2 ranks, one a host; a link of 1 MB/s (a byte a microsecond), 10 us of
// latency, whose one-sided reads need the owner's progress (UCX over TCP).
Scenario TwoHosts() {
  Scenario s;
  s.ranks = 2;
  s.host.set_cores(4);
  s.network.set_name("test");
  s.network.set_latency_us(10);
  s.network.set_bandwidth_gbps(1e-3);
  s.network.set_needs_target_progress(true);
  s.local = s.network;
  return s;
}

// Rank 0 starts an exchange that ends at once, then computes a step (0-50
// ms) and another after its next update (50-100 ms). Its communication
// thread serves from the exchange's start to that update, as
// strategies/communication_thread.h's does: rank 1's read of it at 1 ms is
// answered during the first compute; one at 60 ms waits for the second
// compute to end.
TEST(BackgroundExchangeTest, TheRankServesFromTheExchangeToItsNextUpdate) {
  Job job(TwoHosts(), Costs{});
  BackgroundExchanges background(job);
  const BackgroundExchanges::Exchange ends_at_once = [](std::function<void(bool)> done) {
    done(true);
  };
  background.AfterUpdate(0, 0, /*due=*/true, 0, ends_at_once, [&] {
    job.Compute(0, 50 * kMs, [&] {
      background.AfterUpdate(0, 0, /*due=*/false, 0, ends_at_once,
                             [&] { job.Compute(0, 50 * kMs, [] {}); });
    });
  });
  double served = -1, waited = -1;
  job.loop().After(1 * kMs, [&] { job.Read(1, 0, 1000, [&] { served = job.now(); }); });
  job.loop().After(60 * kMs, [&] { job.Read(1, 0, 1000, [&] { waited = job.now(); }); });
  job.loop().Run();
  // The request's latency, 1000 bytes, their latency.
  EXPECT_NEAR(served, 1 * kMs + 1 * kMs + 2 * 10e-6, 1e-9);
  EXPECT_NEAR(waited, 100 * kMs + 1 * kMs + 10e-6, 1e-9);
}

}  // namespace
}  // namespace rdmaflow::sim::internal
