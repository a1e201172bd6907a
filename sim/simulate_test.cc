// File: simulate_test.cc
// The strategy models against steps worked out by hand, the sync modes'
// order under a straggler, churn, determinism, and the errors a user meets.
#include "sim/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::sim {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A two-layer model: features 10 ms forward, 20 ms backward, 1 MB of
// parameters, 100 KB of activations; head 5 + 10 ms, 4 MB.
ModelProfile TwoLayers() {
  ModelProfile m;
  m.set_model("two_layers");
  m.set_batch_size(64);
  LayerProfile* f = m.add_layers();
  f->set_name("conv");
  f->set_forward_ms(10);
  f->set_backward_ms(20);
  f->set_param_bytes(1e6);
  f->set_output_bytes(1e5);
  LayerProfile* h = m.add_layers();
  h->set_name("fc");
  h->set_head(true);
  h->set_forward_ms(5);
  h->set_backward_ms(10);
  h->set_param_bytes(4e6);
  h->set_output_bytes(64 * 40);
  m.set_loss_ms(1);
  m.set_optimizer_ms(2);
  return m;
}

TEST(SimulateTest, TheWholeStepScalesThePartsTimedAlone) {
  Scenario s;
  s.model = TwoLayers();
  s.model.set_step_ms(23);  // half of the parts' 46 ms
  s.host.set_cores(4);
  s.host.set_memcpy_gbps(10);
  s.host.set_reduce_gbps(5);
  s.network.set_bandwidth_gbps(1);
  s.local = s.network;
  s.strategy = "gossip";
  s.params = {{"period", "1000"}};  // no exchange: compute and SGD only
  s.ranks = 2;
  s.steps = 4;
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  EXPECT_NEAR(run.step_ms(), 23 + 2, 1e-9);
}

Scenario Base(const std::string& strategy, int ranks) {
  Scenario s;
  s.model = TwoLayers();
  s.host.set_cores(64);
  s.host.set_memcpy_gbps(10);
  s.host.set_reduce_gbps(5);
  s.host.set_store_round_trip_us(100);
  s.network.set_name("test");
  s.network.set_latency_us(10);
  s.network.set_bandwidth_gbps(1);
  s.network.set_per_message_us(0);
  s.local = s.network;
  s.strategy = strategy;
  s.ranks = ranks;
  s.steps = 10;
  return s;
}

constexpr double kCompute = 46e-3;  // 10 + 20 + 5 + 10 + 1 ms

TEST(SimulateTest, AllReduceIsComputeThenTheRingThenSgd) {
  Scenario s = Base("allreduce", 2);
  s.params = {{"bucket_bytes", "0"}, {"overlap", "off"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  // 5 MB over 2 ranks: 2 steps of 2.5 MB (10 pieces of 256 KiB), at 1 GB/s.
  const double ring = 2 * (10e-6 + 2.5e-3);
  EXPECT_NEAR(run.step_ms(), (kCompute + ring + 2e-3) * 1e3, 1e-6);
  EXPECT_NEAR(run.comm_ms(), ring * 1e3, 1e-6);
  EXPECT_DOUBLE_EQ(run.wire_bytes_per_step(), 2 * 5e6);
  EXPECT_EQ(run.strategy(), "allreduce");
  EXPECT_EQ(run.ranks(), 2);
}

// overlap=on (the default): the head's 4 MB are all-reduced while backward
// goes through the features (20 ms, longer), then the features' 1 MB.
TEST(SimulateTest, AllReduceOverlapsTheHeadsRingWithTheFeaturesBackward) {
  Scenario s = Base("allreduce", 2);
  s.params = {{"bucket_bytes", "0"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  const double head = 2 * (10e-6 + 2e-3), features = 2 * (10e-6 + 0.5e-3);
  EXPECT_NEAR(run.step_ms(), (kCompute + features + 2e-3) * 1e3, 1e-6);
  EXPECT_NEAR(run.comm_ms(), (head + features) * 1e3, 1e-6);
  EXPECT_NEAR(run.wait_ms(), features * 1e3, 1e-6);
  EXPECT_DOUBLE_EQ(run.wire_bytes_per_step(), 2 * 5e6);
  // A head longer than the features' backward is waited for.
  s.network.set_bandwidth_gbps(0.1);
  s.local = s.network;
  ASSERT_OK_AND_ASSIGN(SimulatedRun slow, Simulate(s));
  const double slow_head = 2 * (10e-6 + 20e-3), slow_features = 2 * (10e-6 + 5e-3);
  EXPECT_NEAR(slow.step_ms(), (26e-3 + slow_head + slow_features + 2e-3) * 1e3, 1e-6);
  EXPECT_THAT(Simulate([&] {
                Scenario bad = Base("allreduce", 2);
                bad.params = {{"overlap", "maybe"}};
                return bad;
              }()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
}

// overlap=forward: the head's fc1 (1.5 MB, within a third of the 6.5 MB)
// is all-reduced during the next step's features forward instead of
// beside the features' backward, which the head's 5.5 MB outlast at
// 0.1 GB/s; fc2, the first head layer backward completes, stays.
TEST(SimulateTest, AllReduceForwardDefersPartOfTheHeadToTheNextForward) {
  Scenario s = Base("allreduce", 2);
  s.model.mutable_layers(1)->set_name("fc1");
  s.model.mutable_layers(1)->set_forward_ms(2);
  s.model.mutable_layers(1)->set_backward_ms(4);
  s.model.mutable_layers(1)->set_param_bytes(1.5e6);
  LayerProfile* fc2 = s.model.add_layers();
  fc2->set_name("fc2");
  fc2->set_head(true);
  fc2->set_forward_ms(3);
  fc2->set_backward_ms(6);
  fc2->set_param_bytes(4e6);
  fc2->set_output_bytes(64 * 40);
  s.network.set_bandwidth_gbps(0.1);
  s.local = s.network;
  // Buckets of 1 MiB: fc2, fc1 and the features each in one of their own.
  s.params = {{"bucket_bytes", "1M"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun on, Simulate(s));
  s.params = {{"bucket_bytes", "1M"}, {"overlap", "forward"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun forward, Simulate(s));
  // overlap=on: the head's 5.5 MB (55 ms at 0.1 GB/s) outlast the
  // features' 20 ms backward. Forward: fc1's 1.5 MB (15 ms) outlast the
  // features' 10 ms forward, fc2's 4 MB (40 ms) the backward: about 10 ms
  // less a step.
  EXPECT_LT(forward.step_ms(), on.step_ms() - 5);
  EXPECT_GT(forward.step_ms(), on.step_ms() - 15);
  EXPECT_DOUBLE_EQ(forward.wire_bytes_per_step(), on.wire_bytes_per_step());
  // A budget of 0 defers nothing, and neither does one bucket of
  // everything (head and features mixed): overlap=on's step.
  s.params = {{"bucket_bytes", "1M"}, {"overlap", "forward"}, {"forward_bytes", "0"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun none, Simulate(s));
  EXPECT_NEAR(none.step_ms(), on.step_ms(), 1e-9);
  s.params = {{"bucket_bytes", "0"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun whole_on, Simulate(s));
  s.params = {{"bucket_bytes", "0"}, {"overlap", "forward"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun whole, Simulate(s));
  EXPECT_NEAR(whole.step_ms(), whole_on.step_ms(), 1e-9);
  s.params = {{"overlap", "forward"}, {"forward_bytes", "lots"}};
  EXPECT_THAT(Simulate(s).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward_bytes")));
}

// Over an emulated link, gossip's overlapped reads are served while the
// owner computes: the ranks no longer take turns waiting out each other's
// compute, and the read hides behind the next step's.
TEST(SimulateTest, OverlappedGossipAndMoshpitHideTheirExchange) {
  for (const char* strategy : {"gossip", "moshpit"}) {
    SCOPED_TRACE(strategy);
    Scenario s = Base(strategy, 4);
    s.network.set_needs_target_progress(true);
    s.network.set_bandwidth_gbps(0.1);  // 5 MB: about 50 ms a read, as long as compute
    s.local = s.network;
    ASSERT_OK_AND_ASSIGN(SimulatedRun off, Simulate(s));
    s.params = {{"overlap", "on"}};
    ASSERT_OK_AND_ASSIGN(SimulatedRun on, Simulate(s));
    EXPECT_LT(on.step_ms(), 0.8 * off.step_ms()) << off.step_ms() << " -> " << on.step_ms() << " comm " << off.comm_ms() << " -> " << on.comm_ms() << " wait " << off.wait_ms() << " -> " << on.wait_ms();
    EXPECT_DOUBLE_EQ(on.wire_bytes_per_step(), off.wire_bytes_per_step());
  }
}

// The parameter server's slices: pushed during backward, and the server's
// two links busy at once (a slice's pulls while later slices arrive). The
// same bytes cross; with one slice as large as the shard, little is gained
// (the one push waits for backward's end).
TEST(SimulateTest, OverlappedParameterServerPipelinesItsSlices) {
  Scenario s = Base("ps", 4);
  s.params = {{"servers", "1"}};
  s.network.set_bandwidth_gbps(0.1);  // 5 MB: 3 x 50 ms of pushes and of pulls
  s.local = s.network;
  ASSERT_OK_AND_ASSIGN(SimulatedRun off, Simulate(s));
  s.params = {{"servers", "1"}, {"overlap", "on"}, {"slice_bytes", "262144"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun on, Simulate(s));
  s.params = {{"servers", "1"}, {"overlap", "on"}, {"slice_bytes", "100000000"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun whole, Simulate(s));
  EXPECT_LT(on.step_ms(), 0.8 * off.step_ms()) << off.step_ms() << " -> " << on.step_ms();
  EXPECT_LT(on.step_ms(), whole.step_ms());
  EXPECT_NEAR(whole.step_ms(), off.step_ms(), 0.05 * off.step_ms());
  // The parameters and gradients, and a few header words more a slice.
  EXPECT_NEAR(on.wire_bytes_per_step(), off.wire_bytes_per_step(),
              1e-3 * off.wire_bytes_per_step());
  EXPECT_EQ(on.update_rule(), "sgd");
  // Left out or auto, the slices are the strategy's: 256 KiB here.
  for (const char* automatic : {"", "auto"}) {
    s.params = {{"servers", "1"}, {"overlap", "on"}};
    if (*automatic != '\0') s.params["slice_bytes"] = automatic;
    ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
    EXPECT_DOUBLE_EQ(run.step_ms(), on.step_ms()) << automatic;
  }
  s.params = {{"overlap", "maybe"}};
  EXPECT_THAT(Simulate(s).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  s.params = {{"overlap", "on"}, {"slice_bytes", "6"}};  // as the strategy refuses it
  EXPECT_THAT(Simulate(s).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of 4")));
}

// With prefetch (the default under bsp) the next step's slices are pulled
// while this step's backward and later pushes run: the server's outgoing
// link no longer starts only once the step ends. The same bytes cross.
TEST(SimulateTest, OverlappedParameterServerPrefetchesTheNextStep) {
  Scenario s = Base("ps", 4);
  s.network.set_bandwidth_gbps(0.1);
  s.local = s.network;
  s.params = {{"servers", "1"}, {"overlap", "on"}, {"slice_bytes", "262144"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun on, Simulate(s));
  s.params["prefetch"] = "off";
  ASSERT_OK_AND_ASSIGN(SimulatedRun late, Simulate(s));
  s.params["prefetch"] = "on";
  ASSERT_OK_AND_ASSIGN(SimulatedRun given, Simulate(s));
  EXPECT_LT(on.step_ms(), 0.9 * late.step_ms()) << late.step_ms() << " -> " << on.step_ms();
  EXPECT_DOUBLE_EQ(given.step_ms(), on.step_ms());
  EXPECT_NEAR(on.wire_bytes_per_step(), late.wire_bytes_per_step(),
              1e-3 * late.wire_bytes_per_step());
  EXPECT_EQ(on.update_rule(), "sgd");
  // Only where the strategy runs it: with overlap=on.
  for (const auto& params : std::vector<std::map<std::string, std::string>>{
           {{"prefetch", "on"}}, {{"sync", "asp"}, {"prefetch", "off"}}}) {
    s.params = params;
    EXPECT_THAT(Simulate(s).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("has overlap=off")));
  }
  // Under asp only when asked, with an update rule of its own (its slices
  // hold fewer of the others' updates), and a step no longer than without.
  s.params = {{"servers", "1"}, {"overlap", "on"}, {"slice_bytes", "262144"}, {"sync", "asp"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun asp, Simulate(s));
  EXPECT_EQ(asp.update_rule(), "ps:asp,overlap=on");
  s.params["prefetch"] = "on";
  ASSERT_OK_AND_ASSIGN(SimulatedRun asp_prefetch, Simulate(s));
  EXPECT_EQ(asp_prefetch.update_rule(), "ps:asp,overlap=on,prefetch=on");
  EXPECT_LE(asp_prefetch.step_ms(), asp.step_ms() * 1.001);
  EXPECT_NEAR(asp_prefetch.wire_bytes_per_step(), asp.wire_bytes_per_step(),
              1e-3 * asp.wire_bytes_per_step());
}

// The update rule and workers every model reports (they key the measured
// convergence): sync SGD for allreduce, bsp and layer_separated, each with
// the ranks whose batches train the model.
TEST(SimulateTest, EachModelNamesItsUpdateRuleAndWorkers) {
  struct Case {
    const char* strategy;
    std::map<std::string, std::string> params;
    const char* rule;
    int workers;
  };
  for (const Case& c : std::vector<Case>{
           {"allreduce", {}, "sgd", 6},
           {"ps", {{"servers", "2"}}, "sgd", 4},
           {"ps", {{"sync", "dssp:1:6"}}, "ps:dssp:1:6", 5},
           {"layer_separated", {{"fc_ranks", "2"}}, "sgd", 4},
           {"gossip", {{"mode", "push"}}, "gossip:mode=push,period=1,topology=random,beta=0.5", 6},
           {"moshpit", {{"period", "2"}}, "moshpit:side=2,period=2", 6},
           {"gossip", {{"overlap", "on"}},
            "gossip:mode=pull,period=1,topology=random,beta=0.5,overlap=on", 6},
           {"moshpit", {{"overlap", "on"}}, "moshpit:side=2,period=1,overlap=on", 6},
           {"allreduce", {{"overlap", "off"}}, "sgd", 6},
           {"ps", {{"overlap", "on"}}, "sgd", 5},
           {"ps", {{"sync", "asp"}, {"overlap", "on"}}, "ps:asp,overlap=on", 5},
           {"ps", {{"sync", "ssp:3"}, {"overlap", "on"}}, "ps:ssp:3,overlap=on", 5},
       }) {
    Scenario s = Base(c.strategy, 6);
    s.params = c.params;
    s.steps = 4;
    ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
    EXPECT_EQ(run.update_rule(), c.rule) << c.strategy;
    EXPECT_EQ(run.workers(), c.workers) << c.strategy;
  }
}

TEST(SimulateTest, AStragglerHoldsBspBackAspNotAndSspInBetween) {
  double step[3];
  const char* syncs[] = {"bsp", "ssp:3", "asp"};
  for (int i = 0; i < 3; ++i) {
    Scenario s = Base("ps", 3);
    s.params = {{"servers", "1"}, {"sync", syncs[i]}};
    s.slow_rank = 2;  // the second worker
    s.slow_factor = 3;
    s.steps = 12;
    ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
    step[i] = run.step_ms();
  }
  EXPECT_GT(step[0], 3 * kCompute * 1e3);  // waits for the straggler
  EXPECT_LT(step[1], step[0]);
  EXPECT_LT(step[2], step[1]);
  EXPECT_LT(step[2], 2 * kCompute * 1e3);  // runs at its own pace
}

// DSSP grants the fast worker extra iterations against the straggler
// (strictly faster than ssp:LOW over 16 steps: the larger lead) but never
// more than ssp:HIGH would.
TEST(SimulateTest, DsspLiesBetweenItsTwoSspBounds) {
  double step[3];
  const char* syncs[] = {"ssp:1", "dssp:1:8", "ssp:8"};
  for (int i = 0; i < 3; ++i) {
    Scenario s = Base("ps", 3);
    s.params = {{"sync", syncs[i]}};
    s.slow_rank = 2;
    s.slow_factor = 2;
    s.jitter = 0;  // a steady straggler: the old interval (wait included) never granted
    s.steps = 16;
    ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
    step[i] = run.step_ms();
  }
  EXPECT_LT(step[1], 0.99 * step[0]);
  EXPECT_GE(step[1], step[2]);
  EXPECT_LT(step[2], step[0]);
}

TEST(SimulateTest, PsPushesAndPullsEveryParameterEveryStep) {
  Scenario s = Base("ps", 3);
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  // Two workers push 5 MB and pull 5 MB each (plus headers and stamps).
  EXPECT_GE(run.wire_bytes_per_step(), 2 * 2 * 5e6);
  EXPECT_LT(run.wire_bytes_per_step(), 2 * 2 * 5e6 + 1e4);
  // bsp: the step is at least compute + the pull of 5 MB at 1 GB/s.
  EXPECT_GT(run.step_ms(), (kCompute + 5e-3) * 1e3);
}

TEST(SimulateTest, LayerSeparatedByHand) {
  Scenario s = Base("layer_separated", 2);
  s.params = {{"fc_ranks", "1"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  // features forward; activations + labels over; head + loss; gradients
  // back; features backward; no all-reduce with one rank a side; SGD of the
  // features (1/5 of the optimizer).
  const double over = 10e-6 + (1e5 + 8 * 64) / 1e9;
  const double back = 10e-6 + (1e5 + 8) / 1e9;
  const double expected = 10e-3 + over + 16e-3 + back + 20e-3 + 0.4e-3;
  EXPECT_NEAR(run.step_ms(), expected * 1e3, 1e-6);
  EXPECT_NEAR(run.wait_ms(), (over + 16e-3 + back) * 1e3, 1e-6);
}

TEST(SimulateTest, LayerSeparatedOverlapPipelinesTheNextForward) {
  Scenario s = Base("layer_separated", 2);
  s.params = {{"fc_ranks", "1"}, {"overlap", "on"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  const double over = 10e-6 + (1e5 + 8 * 64) / 1e9;
  const double back = 10e-6 + (1e5 + 8) / 1e9;
  // Step 0 as without overlap (batch 1's forward fits in the FC rank's
  // 16 ms); steps 1-8 forward the next batch, then back-propagate (whose
  // gradients are in by then) and SGD; step 9 has no batch ahead.
  const double first = 10e-3 + over + 16e-3 + back + 20e-3 + 0.4e-3;
  const double expected = (first + 8 * 30.4e-3 + 20.4e-3) / 10;
  EXPECT_NEAR(run.step_ms(), expected * 1e3, 1e-6);
  // As the strategy records rank 0's step: step 0 communicates and waits
  // from the end of its two forwards to the gradients; steps 1-8 have
  // communication in flight during the forward ahead (10 ms) and do not
  // wait; step 9 neither; every step's SGD counts as communication.
  const double first_wait = over + 16e-3 + back - 10e-3;
  EXPECT_NEAR(run.comm_ms(), (first_wait + 8 * 10e-3 + 10 * 0.4e-3) / 10 * 1e3, 1e-6);
  EXPECT_NEAR(run.wait_ms(), first_wait / 10 * 1e3, 1e-6);
  EXPECT_EQ(run.update_rule(), "sgd:features_stale=1");
  s.params = {{"fc_ranks", "1"}, {"overlap", "maybe"}};
  EXPECT_THAT(Simulate(s).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// With overlap and a straggler, a fast conv rank sends batch t+1 before the
// slow one sent batch t; the FC rank still serves each step with one batch
// of each, so the slow rank's forward and backward (30 + 60 ms, serial on
// it) set the pace, and rank 0's communication fits in its steps.
TEST(SimulateTest, LayerSeparatedOverlapKeepsAStragglersPace) {
  Scenario s = Base("layer_separated", 3);
  s.params = {{"fc_ranks", "1"}, {"overlap", "on"}};
  s.slow_rank = 1;
  s.slow_factor = 3;
  ASSERT_OK_AND_ASSIGN(SimulatedRun slow, Simulate(s));
  EXPECT_GE(slow.step_ms(), (30 + 60) * 0.9);
  EXPECT_LT(slow.step_ms(), (30 + 60) * 1.2);
  EXPECT_GT(slow.wait_ms(), 0);
  EXPECT_LE(slow.comm_ms(), slow.step_ms());
}

TEST(SimulateTest, LayerSeparatedChoosesKWhenNotTold) {
  Scenario s = Base("layer_separated", 4);
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  EXPECT_GT(run.step_ms(), 0);
  EXPECT_GT(run.samples_per_s(), 0);
}

TEST(SimulateTest, GossipPullReadsOnePeerAndNeverWaits) {
  Scenario s = Base("gossip", 2);
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  // compute, SGD, copy out 5 MB, three reads (header, 5 MB, stamp: each a
  // request latency and the data's), mix.
  const double reads = 3 * 20e-6 + (64 + 5e6 + 8) / 1e9;
  const double expected = kCompute + 2e-3 + 5e6 / 10e9 + reads + 5e6 / 5e9;
  EXPECT_NEAR(run.step_ms(), expected * 1e3, 1e-6);
  EXPECT_EQ(run.wait_ms(), 0);
}

TEST(SimulateTest, GossipPushAndRingTopologyRun) {
  Scenario s = Base("gossip", 4);
  s.params = {{"mode", "push"}, {"topology", "ring"}, {"period", "2"}};
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  EXPECT_GT(run.step_ms(), kCompute * 1e3);
  // Every other step, 4 ranks write 5 MB each.
  EXPECT_NEAR(run.wire_bytes_per_step(), 4 * (5e6 + 16) / 2, 1);
}

TEST(SimulateTest, MoshpitWaitsForADeadMemberOnceThenLeavesItOut) {
  Scenario s = Base("moshpit", 4);
  s.steps = 20;
  ASSERT_OK_AND_ASSIGN(SimulatedRun healthy, Simulate(s));
  s.kill_rank = 1;
  s.kill_step = 5;
  ASSERT_OK_AND_ASSIGN(SimulatedRun churn, Simulate(s));
  // One group timeout (2 s) over 20 steps, give or take a round.
  const double extra = churn.step_ms() - healthy.step_ms();
  EXPECT_GT(extra, 2000.0 / 20 * 0.8);
  EXPECT_LT(extra, 2000.0 / 20 * 1.3);
}

TEST(SimulateTest, GossipGoesOnWithoutADeadPeer) {
  Scenario s = Base("gossip", 4);
  s.kill_rank = 3;
  s.kill_step = 2;
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  EXPECT_EQ(run.steps(), 10);
  EXPECT_GT(run.step_ms(), 0);
}

TEST(SimulateTest, SameScenarioSameResult) {
  Scenario s = Base("gossip", 8);
  s.jitter = 0.2;
  ASSERT_OK_AND_ASSIGN(SimulatedRun a, Simulate(s));
  ASSERT_OK_AND_ASSIGN(SimulatedRun b, Simulate(s));
  EXPECT_EQ(a.step_ms(), b.step_ms());
  s.seed = 2;
  ASSERT_OK_AND_ASSIGN(SimulatedRun c, Simulate(s));
  EXPECT_NE(a.step_ms(), c.step_ms());
}

TEST(SimulateTest, ThousandsOfRanks) {
  for (const char* strategy : {"allreduce", "gossip", "moshpit", "ps"}) {
    Scenario s = Base(strategy, 1024);
    s.steps = 3;
    if (std::string(strategy) == "ps") s.params = {{"servers", "2"}};
    ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
    EXPECT_GT(run.step_ms(), kCompute * 1e3) << strategy;
  }
}

TEST(SimulateTest, OversubscribedCoresSlowCompute) {
  Scenario s = Base("allreduce", 4);
  s.ranks_per_host = 4;
  s.host.set_cores(2);
  ASSERT_OK_AND_ASSIGN(SimulatedRun run, Simulate(s));
  EXPECT_GT(run.step_ms(), 2 * kCompute * 1e3);
}

// Over a link whose one-sided operations are emulated (UCX over TCP), a read
// is served only once its owner progresses: gossip, which never waits for a
// peer over RDMA, waits for a straggling peer to finish its compute.
TEST(SimulateTest, AnEmulatedReadWaitsForItsOwnerToProgress) {
  Scenario s = Base("gossip", 2);
  s.slow_rank = 1;
  s.slow_factor = 3;
  ASSERT_OK_AND_ASSIGN(SimulatedRun one_sided, Simulate(s));
  s.network.set_needs_target_progress(true);
  s.local = s.network;
  ASSERT_OK_AND_ASSIGN(SimulatedRun emulated, Simulate(s));
  // Rank 0 reports: with true one-sided reads its step is its own; emulated,
  // each of its exchanges waits out rank 1's step (3x the compute, then SGD
  // and its copy).
  EXPECT_LT(one_sided.step_ms(), 1.2 * kCompute * 1e3);
  EXPECT_GT(emulated.step_ms(), 2.5 * kCompute * 1e3);
  EXPECT_GT(emulated.comm_ms(), 1.5 * kCompute * 1e3);
  // Without a straggler too: the rank whose read ends first goes back to
  // computing while the other's read still needs it, and from then on the
  // two take turns, each waiting out the other's compute (as 2-rank gossip
  // over 1 Gbit/s TCP measures: docs/scale.md). True one-sided reads never
  // wait.
  s.slow_rank = -1;
  ASSERT_OK_AND_ASSIGN(SimulatedRun turns, Simulate(s));
  EXPECT_GT(turns.step_ms(), 1.8 * kCompute * 1e3);
  s.network.set_needs_target_progress(false);
  s.local = s.network;
  ASSERT_OK_AND_ASSIGN(SimulatedRun free, Simulate(s));
  EXPECT_LT(free.step_ms(), 1.2 * kCompute * 1e3);
}

// Namespace hosts sharing 2 cores: the link's measured shared-ring
// bandwidth reaches allreduce's ring (5 MB of gradients; at 1 GB/s the
// ring takes 7.5 ms a step, at 0.25 GB/s 30 ms).
TEST(SimulateTest, AllReduceOnSharedCoresTakesTheMeasuredRing) {
  Scenario s = Base("allreduce", 4);
  s.params = {{"bucket_bytes", "0"}, {"overlap", "off"}};
  s.shared_cores = 2;
  ASSERT_OK_AND_ASSIGN(SimulatedRun link_rate, Simulate(s));
  s.network.set_shared_ring_gbps(0.25);
  s.network.set_shared_ring_ranks(4);
  s.host.set_cores(2);
  ASSERT_OK_AND_ASSIGN(SimulatedRun measured, Simulate(s));
  EXPECT_NEAR(measured.step_ms() - link_rate.step_ms(), 22.5, 2.0);
}

// A notified write over an emulated link is the data, a flush, then the
// flag, and the writer's own progress sends the flag once the flush is
// answered. Stanza's pipelined conv rank posts batch t+1's activations and
// goes straight into batch t's backward when its gradients are in: the FC
// rank then sees batch t+1 only after that backward, and the step grows.
// Over a link with true one-sided writes it sees them at once.
TEST(SimulateTest, AWriterThatComputesHoldsItsOwnNotification) {
  Scenario s = Base("layer_separated", 2);
  s.params = {{"fc_ranks", "1"}, {"overlap", "on"}};
  s.steps = 20;
  ASSERT_OK_AND_ASSIGN(SimulatedRun one_sided, Simulate(s));
  s.network.set_needs_target_progress(true);
  s.local = s.network;
  ASSERT_OK_AND_ASSIGN(SimulatedRun emulated, Simulate(s));
  // One-sided: the conv rank's forward and backward back to back (30 ms a
  // step), the FC rank's 16 ms hidden behind them.
  EXPECT_NEAR(one_sided.step_ms(), 30 + 2 * 0.2, 1.5);
  // Emulated: every other step the FC rank's work starts only after the
  // conv rank's backward and is then waited for.
  EXPECT_GT(emulated.step_ms(), 1.05 * one_sided.step_ms());
}

// Time sharing: 8 ranks on 2 cores compute 4x as long, times the measured
// slowdown at 4 ranks a core; 4 ranks (2 a core) interpolate between 1 at one
// rank a core and that point.
TEST(SimulateTest, TimeSharingSlowsComputeByTheMeasuredFactor) {
  for (int ranks : {8, 4}) {
    Scenario s = Base("gossip", ranks);
    s.params = {{"period", "1000"}};  // compute and SGD only
    s.shared_cores = 2;
    ASSERT_OK_AND_ASSIGN(SimulatedRun plain, Simulate(s));
    TimeSharing* point = s.host.add_time_sharing();
    point->set_ranks_per_core(4);
    point->set_slowdown(1.25);
    ASSERT_OK_AND_ASSIGN(SimulatedRun shared, Simulate(s));
    const double expected = ranks == 8 ? 1.25 : 1 + 0.25 / 3;
    EXPECT_NEAR(shared.step_ms() / plain.step_ms(), expected, 1e-9) << ranks;
  }
}

// A rank that waits polls its link: where ranks outnumber cores that CPU
// comes out of the others' compute (a compute runs slower by the waiting
// ranks' share of the pool); with a core each it costs nothing.
TEST(SimulateTest, WaitingTakesCpuOnlyWhereRanksOutnumberCores) {
  // 8 ranks on one pool of 2 cores; 2 hosts of 4 ranks on 2 cores each;
  // 8 hosts with 64 cores each.
  for (int shared : {2, -1, 0}) {
    // The server waits for pushes while the 7 workers compute.
    Scenario s = Base("ps", 8);
    s.params = {{"servers", "1"}, {"sync", "asp"}};
    s.shared_cores = std::max(0, shared);
    if (shared < 0) {
      s.ranks_per_host = 4;
      s.host.set_cores(2);
    }
    ASSERT_OK_AND_ASSIGN(SimulatedRun quiet, Simulate(s));
    s.network.set_wait_cpu(0.5);
    s.local = s.network;
    ASSERT_OK_AND_ASSIGN(SimulatedRun polling, Simulate(s));
    if (shared != 0) {
      EXPECT_GT(polling.step_ms(), 1.1 * quiet.step_ms()) << shared;
    } else {
      EXPECT_DOUBLE_EQ(polling.step_ms(), quiet.step_ms());
    }
  }
}

TEST(SimulateTest, BadScenariosAreNamed) {
  Scenario s = Base("nope", 2);
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("known: ps")));
  s = Base("gossip", 2);
  s.host.add_time_sharing()->set_ranks_per_core(2);  // slowdown 0 < 1
  EXPECT_THAT(Simulate(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("time sharing")));
  s = Base("gossip", 2);
  s.network.set_wait_cpu(1.5);
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wait CPU")));
  s = Base("gossip", 2);
  s.network.set_moving_cpu(-0.5);
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("moving CPU")));
  s = Base("gossip", 2);
  s.network.set_unattended_bytes(-1);
  EXPECT_THAT(Simulate(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unattended bytes")));
  s.network.set_unattended_bytes(100);  // a handful of bytes: an event per 100
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                    AllOf(HasSubstr("unattended_bytes 100"), HasSubstr("0 means"))));
  s = Base("ps", 2);
  s.params = {{"servers", "2"}};
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker")));
  s = Base("ps", 3);
  s.params = {{"pull", "send"}};  // the strategy runs it; the model does not
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pull=send")));
  s.params = {{"overlap", "on"}, {"slice_bytes", "1M"}};  // as the strategy refuses it
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slice_bytes")));
  s.params = {{"overlap", "on"}, {"slice_bytes", "4"}};  // more than 1024 slices, refused too
  EXPECT_THAT(Simulate(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("use larger slices")));
  s.params = {{"sync", "ssp:-1"}};
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ssp")));
  s = Base("gossip", 2);
  s.params = {{"colour", "red"}};
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("colour")));
  s = Base("allreduce", 2);
  s.network.set_bandwidth_gbps(0);
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bandwidth")));
  s = Base("allreduce", 2);
  s.model.clear_layers();
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no layers")));
  s = Base("allreduce", 2);
  s.slow_rank = 5;
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slow")));
  s = Base("gossip", 2);
  s.kill_rank = 0;
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kill")));
  s = Base("layer_separated", 3);
  s.params = {{"fc_ranks", "3"}};
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fc_ranks")));
  s = Base("layer_separated", 4);
  s.params = {{"fc_ranks", "3"}};  // two FC ranks would serve nobody
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("serve no")));
  s = Base("allreduce", 4);
  s.kill_rank = 2;
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gossip")));
  s = Base("allreduce", 2);
  s.model.mutable_layers(0)->set_forward_ms(std::numeric_limits<double>::infinity());
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer 'conv'")));
  s = Base("allreduce", 2);
  s.host.set_group_setup_ms(std::nan(""));
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host")));
  s = Base("allreduce", 1 << 20);
  s.steps = 1000;
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank-steps")));
  s = Base("moshpit", 4);
  s.params = {{"dims", "1000"}};
  EXPECT_THAT(Simulate(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dims")));
}

}  // namespace
}  // namespace rdmaflow::sim
