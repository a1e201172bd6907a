// File: simulate.h
// -----------------------------------------------------------------------------
// Simulate(): one training job's steps, predicted. A scenario names a model
// (its measured layer times), a strategy with its settings, the ranks and how
// they sit on hosts, the links, and what goes wrong (a straggler, jitter, a
// rank that dies). Each strategy is modelled as its code runs it
// (docs/scale.md, "What the simulator models"), reusing the strategies'
// own decision code where it is pure: the parameter server's clock table
// (ps/sync_policy.h, DSSP's choice included), Stanza's choice of K
// (layer_separated/cost_model.h), the gossip peer selector and the Moshpit
// grid.
//
//   ASSIGN_OR_RETURN(SimulatedRun run, Simulate(scenario));
#ifndef RDMAFLOW_SIM_SIMULATE_H_
#define RDMAFLOW_SIM_SIMULATE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {

// Value type.
struct Scenario {
  ModelProfile model;
  HostProfile host;
  LinkProfile network;  // between hosts
  LinkProfile local;    // within a host
  // "ps", "allreduce", "layer_separated", "gossip", "moshpit", and its
  // settings as rdmaflow_train takes them (ps: servers=, sync=;
  // layer_separated: fc_ranks=; gossip: mode=, period=, topology=;
  // moshpit: side=, dims=, period=, group_timeout_ms=; all-reduce users:
  // bucket_bytes=, chunk_bytes=).
  std::string strategy;
  std::map<std::string, std::string> params;
  int ranks = 2;
  int ranks_per_host = 1;
  // > 0: all hosts share this many cores (namespace hosts on one machine);
  // else each host has host.cores().
  int shared_cores = 0;
  int steps = 20;
  // A straggler: this rank's compute takes slow_factor times as long (it
  // sleeps the difference, as rdmaflow_train's --slow_rank does).
  int slow_rank = -1;
  double slow_factor = 1;
  // Every compute varies by a factor drawn uniformly from
  // [1 - jitter, 1 + jitter].
  double jitter = 0;
  // Churn: this rank is gone from before step kill_step on.
  int kill_rank = -1;
  int kill_step = 0;
  uint64_t seed = 1;
};

// The strategies Simulate() knows.
std::vector<std::string> SimulatedStrategies();

// kInvalidArgument naming the setting for a scenario that cannot run (a
// strategy it does not know, a bad setting, too few ranks, a link without
// bandwidth, a model without layers).
absl::StatusOr<SimulatedRun> Simulate(const Scenario& scenario);

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_SIMULATE_H_
