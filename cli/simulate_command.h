// File: simulate_command.h
// -----------------------------------------------------------------------------
// `rdmaflow simulate`: predicts the step time of strategies at rank counts
// and over links this machine may not have (sim/simulate.h), from a
// calibration file (`rdmaflow calibrate`). Prints a table, writes JSON
// (sim/sim.proto's SimulationReport) with --json.
#ifndef RDMAFLOW_CLI_SIMULATE_COMMAND_H_
#define RDMAFLOW_CLI_SIMULATE_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace rdmaflow::cli {

// `args` excludes "simulate". Exit status: 0 simulated, 1 a file cannot be
// read or a scenario cannot run, 2 a usage error.
int RunSimulateCommand(const std::vector<std::string>& args, std::ostream& out,
                       std::ostream& err);

std::string SimulateUsage();

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_SIMULATE_COMMAND_H_
