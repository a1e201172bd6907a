// File: collective_time_test.cc
#include "sim/collective_time.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::sim {
namespace {

Topology Hosts(int ranks, int per_host, int cores) {
  Topology t;
  t.ranks = ranks;
  t.ranks_per_host = per_host;
  t.cores_per_host = cores;
  t.network.set_latency_us(10);
  t.network.set_bandwidth_gbps(1);
  t.network.set_per_message_us(1);
  t.local.set_latency_us(1);
  t.local.set_bandwidth_gbps(10);
  return t;
}

HostProfile Host() {
  HostProfile h;
  h.set_cores(2);
  h.set_memcpy_gbps(10);
  h.set_reduce_gbps(4);
  return h;
}

std::vector<int> All(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(CollectiveTimeTest, OneMemberCostsNothing) {
  AllReduceCost c = AllReduceTime(Hosts(4, 1, 2), Host(), {2}, 1e6);
  EXPECT_EQ(c.algorithm, "none");
  EXPECT_EQ(c.seconds, 0);
}

TEST(CollectiveTimeTest, TheRingByHand) {
  // 4 hosts, one rank each, 1 MB in one bucket: segments of 250 KB, one
  // piece each (chunk 256 KiB). Reduce-scatter steps: 10 us + 1 us +
  // max(250 us transfer, 62.5 us reduce); all-gather steps the same but
  // 250 us. 3 + 3 steps.
  AllReduceShape shape;
  shape.bucket_bytes = 0;
  AllReduceCost c = AllReduceTime(Hosts(4, 1, 2), Host(), All(4), 1e6, shape);
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_NEAR(c.seconds, 6 * (11e-6 + 250e-6), 1e-9);
  EXPECT_DOUBLE_EQ(c.wire_bytes, 2.0 * 3 * 1e6);
}

// Namespace hosts on one machine: a ring whose members outnumber the cores
// they share runs at the link's measured shared-ring bandwidth; with a
// core a member, or hosts of their own, at the link's.
TEST(CollectiveTimeTest, ARingSharingTooFewCoresRunsAtItsMeasuredBandwidth) {
  AllReduceShape shape;
  shape.bucket_bytes = 0;
  Topology t = Hosts(4, 1, 2);
  t.network.set_shared_ring_gbps(0.5);
  // Hosts of their own: as by hand above.
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, 6 * (11e-6 + 250e-6), 1e-9);
  // 4 members on 2 shared cores: 250 KB at 0.5 GB/s (500 us) a step; the
  // reduce (62.5 us, twice as long on half a core) still hides under it.
  t.shared_cores = 2;
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, 6 * (11e-6 + 500e-6), 1e-9);
  // As many cores as members: the link's bandwidth.
  t.shared_cores = 4;
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, 6 * (11e-6 + 250e-6), 1e-9);
  // Measured faster than the link: the link's bandwidth bounds it.
  t.shared_cores = 2;
  t.network.set_shared_ring_gbps(5);
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, 6 * (11e-6 + 250e-6), 1e-9);
  // Measured with 4 ranks on the host's 2 cores: a ring of 3 on 2 cores is
  // less crowded than that and keeps the link's bandwidth.
  t.network.set_shared_ring_gbps(0.5);
  t.network.set_shared_ring_ranks(4);
  const Topology three = [&] {
    Topology u = t;
    u.ranks = 3;
    return u;
  }();
  EXPECT_NEAR(AllReduceTime(three, Host(), All(3), 0.75e6, shape).seconds,
              4 * (11e-6 + 250e-6), 1e-9);
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, 6 * (11e-6 + 500e-6), 1e-9);
}

// Hierarchical across namespace hosts: the leaders' ring is what shares the
// cores; 2 hosts of 2 ranks on 2 cores run their ring of 2 at the link's.
TEST(CollectiveTimeTest, TheLeadersRingCountsItsOwnMembers) {
  AllReduceShape shape;
  shape.bucket_bytes = 0;
  Topology t = Hosts(4, 2, 2);
  t.shared_cores = 2;
  const double plain = AllReduceTime(t, Host(), All(4), 1e6, shape).seconds;
  t.network.set_shared_ring_gbps(0.5);
  EXPECT_EQ(AllReduceTime(t, Host(), All(4), 1e6, shape).algorithm, "hierarchical");
  EXPECT_DOUBLE_EQ(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, plain);
  // 8 ranks, 2 a host: 4 leaders on 2 cores, and their ring slows.
  Topology eight = Hosts(8, 2, 2);
  eight.shared_cores = 2;
  const double before = AllReduceTime(eight, Host(), All(8), 1e6, shape).seconds;
  eight.network.set_shared_ring_gbps(0.5);
  EXPECT_GT(AllReduceTime(eight, Host(), All(8), 1e6, shape).seconds, before + 1e-3);
}

TEST(CollectiveTimeTest, AShapersTokensTakeOffTheRingsFirstSends) {
  AllReduceShape shape;
  shape.bucket_bytes = 0;
  const Topology t = Hosts(4, 1, 2);
  const double plain = AllReduceTime(t, Host(), All(4), 1e6, shape).seconds;
  shape.burst_tokens = 3e5;  // 300 us of the 1 GB/s link
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, plain - 300e-6, 1e-12);
  shape.burst_tokens = 1e9;  // at most what a member sends: 1.5 MB
  EXPECT_NEAR(AllReduceTime(t, Host(), All(4), 1e6, shape).seconds, plain - 1.5e-3, 1e-12);
}

TEST(CollectiveTimeTest, BucketsRunOneAfterAnother) {
  AllReduceShape one;
  one.bucket_bytes = 0;
  AllReduceShape two = one;
  two.bucket_bytes = 5e5;
  const Topology t = Hosts(4, 1, 2);
  const double whole = AllReduceTime(t, Host(), All(4), 1e6, one).seconds;
  const double halves = AllReduceTime(t, Host(), All(4), 1e6, two).seconds;
  const double half = AllReduceTime(t, Host(), All(4), 5e5, one).seconds;
  EXPECT_NEAR(halves, 2 * half, 1e-12);
  EXPECT_GT(halves, whole);  // one more set of latencies
}

TEST(CollectiveTimeTest, OneHostTakesTheHostPathsAndSharesItsCores) {
  const Topology t = Hosts(4, 4, 2);
  AllReduceCost small = AllReduceTime(t, Host(), All(4), 4096);
  EXPECT_EQ(small.algorithm, "host-one-shot");
  AllReduceCost large = AllReduceTime(t, Host(), All(4), 4e6);
  EXPECT_EQ(large.algorithm, "host-scatter-gather");
  // One bucket of 4e6 (under 4 MiB): each member reduces 3 segments of 1e6
  // at 4 GB/s and copies 3 out at 10 GB/s; 4 members on 2 cores: twice.
  EXPECT_NEAR(large.seconds, 2e-6 + 2 * (3 * 1e6 / 4e9 + 3 * 1e6 / 10e9), 1e-12);
  // Four cores: no sharing.
  const Topology wide = Hosts(4, 4, 4);
  EXPECT_NEAR(AllReduceTime(wide, Host(), All(4), 4e6).seconds,
              2e-6 + (3 * 1e6 / 4e9 + 3 * 1e6 / 10e9), 1e-12);
}

TEST(CollectiveTimeTest, SeveralHostsWithSeveralRanksGoHierarchical) {
  AllReduceShape shape;
  shape.bucket_bytes = 0;
  const Topology t = Hosts(8, 4, 4);
  AllReduceCost h = AllReduceTime(t, Host(), All(8), 4e6, shape);
  EXPECT_EQ(h.algorithm, "hierarchical");
  // The leaders' ring of 2 moves the whole vector once each way over the
  // network, where a flat ring of 8 would cross it 14 times in pieces.
  Topology flat = Hosts(8, 1, 4);
  AllReduceCost ring = AllReduceTime(flat, Host(), All(8), 4e6, shape);
  EXPECT_EQ(ring.algorithm, "ring");
  EXPECT_GT(h.seconds, 0);
  EXPECT_LT(h.seconds, ring.seconds);
}

}  // namespace
}  // namespace rdmaflow::sim
