// File: background_exchange_test.cc
// An exchange left running beside the next step (overlap=on): how long the
// rank serves its peers.
#include "sim/internal/background_exchange.h"

#include <functional>

#include "gtest/gtest.h"
#include "sim/internal/job.h"
#include "sim/internal/test_hosts.h"

namespace rdmaflow::sim::internal {
namespace {

constexpr double kMs = 1e-3;

// Rank 0 starts an exchange that ends at once, then computes a step (0-50
// ms) and another after its next update (50-100 ms). Its communication
// thread serves from the exchange's start to that update, as
// strategies/communication_thread.h's does: rank 1's read of it at 1 ms is
// answered during the first compute; one at 60 ms waits for the second
// compute to end.
TEST(BackgroundExchangeTest, TheRankServesFromTheExchangeToItsNextUpdate) {
  Job job(SlowLinkHosts(2, /*emulated=*/true), Costs{});
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
