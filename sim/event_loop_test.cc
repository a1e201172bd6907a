// File: event_loop_test.cc
#include "sim/event_loop.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::sim {
namespace {

LinkProfile Link(double latency_us, double gbps, double per_message_us) {
  LinkProfile link;
  link.set_latency_us(latency_us);
  link.set_bandwidth_gbps(gbps);
  link.set_per_message_us(per_message_us);
  return link;
}

Topology TwoHosts(int ranks_per_host, int cores) {
  Topology t;
  t.ranks = 2 * ranks_per_host;
  t.ranks_per_host = ranks_per_host;
  t.cores_per_host = cores;
  t.network = Link(10, 1, 2);   // 1 GB/s: 1 us a KB
  t.local = Link(1, 10, 0);
  return t;
}

TEST(EventLoopTest, ComputeQueuesOnTheHostsCores) {
  for (int cores : {1, 2}) {
    EventLoop loop(TwoHosts(2, cores));
    std::vector<double> ends;
    for (int rank : {0, 1}) loop.Compute(rank, 1.0, [&] { ends.push_back(loop.now()); });
    // Rank 2 is on the other host: its core is free.
    loop.Compute(2, 1.0, [&] { ends.push_back(loop.now()); });
    loop.Run();
    ASSERT_EQ(ends.size(), 3u);
    if (cores == 1) {
      EXPECT_DOUBLE_EQ(ends[0], 1.0);
      EXPECT_DOUBLE_EQ(ends[1], 1.0);  // the other host's rank 2
      EXPECT_DOUBLE_EQ(ends[2], 2.0);  // rank 1 queued behind rank 0
    } else {
      EXPECT_DOUBLE_EQ(ends[0], 1.0);
      EXPECT_DOUBLE_EQ(ends[1], 1.0);
      EXPECT_DOUBLE_EQ(ends[2], 1.0);
    }
  }
}

TEST(EventLoopTest, SharedCoresServeEveryHost) {
  Topology t = TwoHosts(1, 8);
  t.shared_cores = 1;
  EventLoop loop(t);
  std::vector<double> ends;
  for (int rank : {0, 1}) loop.Compute(rank, 1.0, [&] { ends.push_back(loop.now()); });
  loop.Run();
  EXPECT_EQ(ends, (std::vector<double>{1.0, 2.0}));
}

TEST(EventLoopTest, AMessageHoldsBothPortsThenTakesTheLatency) {
  EventLoop loop(TwoHosts(1, 1));
  std::vector<double> arrivals;
  // 1000 bytes at 1 GB/s = 1 us, + 2 us per message, + 10 us latency.
  loop.Transfer(0, 1, 1000, [&] { arrivals.push_back(loop.now()); });
  // Same sender: waits for its egress port (3 us), then 3 + 10 more.
  loop.Transfer(0, 1, 1000, [&] { arrivals.push_back(loop.now()); });
  // The other direction uses other ports: as fast as the first.
  loop.Transfer(1, 0, 1000, [&] { arrivals.push_back(loop.now()); });
  loop.Run();
  ASSERT_EQ(arrivals.size(), 3u);
  EXPECT_NEAR(arrivals[0], 13e-6, 1e-12);
  EXPECT_NEAR(arrivals[1], 13e-6, 1e-12);
  EXPECT_NEAR(arrivals[2], 16e-6, 1e-12);
  EXPECT_DOUBLE_EQ(loop.wire_bytes(), 3000);
}

TEST(EventLoopTest, AShapersBurstPassesAtOnceAfterIdle) {
  Topology t = TwoHosts(1, 1);
  t.network.set_per_message_us(0);
  t.network.set_burst_bytes(3000);  // 3 us of the link
  EventLoop loop(t);
  std::vector<double> arrivals;
  // 2000 bytes from a full bucket: at once, + 10 us latency.
  loop.Transfer(0, 1, 2000, [&] {
    arrivals.push_back(loop.now());
    // 1000 tokens left (+ 10 us of refill, capped at 3000): 5000 bytes
    // send 2000 at the rate, 2 us.
    loop.Transfer(0, 1, 5000, [&] { arrivals.push_back(loop.now()); });
  });
  loop.Run();
  ASSERT_EQ(arrivals.size(), 2u);
  EXPECT_NEAR(arrivals[0], 10e-6, 1e-12);
  EXPECT_NEAR(arrivals[1], 10e-6 + 2e-6 + 10e-6, 1e-12);
}

TEST(EventLoopTest, RanksOfOneHostUseTheHostLink) {
  EventLoop loop(TwoHosts(2, 2));
  double local = -1, remote = -1;
  loop.Transfer(0, 1, 10000, [&] { local = loop.now(); });   // 1 us + 1 us
  loop.Transfer(0, 2, 10000, [&] { remote = loop.now(); });  // 10 + 2 + 10 us
  loop.Run();
  EXPECT_NEAR(local, 2e-6, 1e-12);
  EXPECT_NEAR(remote, 22e-6, 1e-12);
}

TEST(EventLoopTest, EventsAtOneTimeRunInTheOrderScheduled) {
  EventLoop loop(TwoHosts(1, 1));
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) loop.After(1.0, [&, i] { order.push_back(i); });
  loop.After(0.5, [&] { order.push_back(-1); });
  loop.Run();
  EXPECT_EQ(order, (std::vector<int>{-1, 0, 1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(loop.now(), 1.0);
}

TEST(EventLoopTest, StopLeavesTheRestUnrun) {
  EventLoop loop(TwoHosts(1, 1));
  int ran = 0;
  loop.After(1, [&] {
    ++ran;
    loop.Stop();
  });
  loop.After(2, [&] { ++ran; });
  loop.Run();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace rdmaflow::sim
