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
#include "sim/scenario.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {


// The strategies Simulate() knows.
std::vector<std::string> SimulatedStrategies();

// kInvalidArgument naming the setting for a scenario that cannot run (a
// strategy it does not know, a bad setting, too few ranks, a link without
// bandwidth, a model without layers).
absl::StatusOr<SimulatedRun> Simulate(const Scenario& scenario);

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_SIMULATE_H_
