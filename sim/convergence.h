// File: convergence.h
// -----------------------------------------------------------------------------
// Time to accuracy: a simulated run's step time times the steps a measured
// run of the same update rule needed to reach the target accuracy
// (tools/measure_convergence.sh writes docs/scale/convergence.json).
//
// Which measured run stands for a simulated one: the same model and update
// rule (SimulatedRun.update_rule), and among those the most workers not
// above the simulated run's (else the fewest). So a 1024-rank run takes the
// steps measured at the largest size this machine ran: the assumption is
// that a larger job needs as many steps as that one, at a fixed batch per
// rank and learning rate (docs/scale.md says what that leaves out).
#ifndef RDMAFLOW_SIM_CONVERGENCE_H_
#define RDMAFLOW_SIM_CONVERGENCE_H_

#include "absl/status/status.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {

// kInvalidArgument naming what to fix for a file that cannot be used: no
// model, a target accuracy outside (0, 1] (NaN included), a point without an
// update rule, with workers < 1, with steps_run above 1e9 or steps_to_target
// outside [0, steps_run], or two points of one rule and worker count.
absl::Status CheckConvergence(const Convergence& convergence);

// The point that stands for `run` (nullptr: none measured for its model and
// rule).
const ConvergencePoint* FindConvergence(const Convergence& convergence,
                                        const SimulatedRun& run);

// Sets run's steps_to_target, convergence_workers and time_to_accuracy_s
// from FindConvergence (left 0 where nothing stands for it or the measured
// run never reached the target).
void AddTimeToAccuracy(const Convergence& convergence, SimulatedRun* run);

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_CONVERGENCE_H_
