// File: calibrate_command.h
// -----------------------------------------------------------------------------
// `rdmaflow calibrate`: builds the step-time simulator's calibration file
// from this machine's measurements (ping-pong reports per link, the
// collectives' bench, model profiles); sim/calibration.h says how each is
// read. tools/calibrate_sim.sh runs the measurements and then this.
#ifndef RDMAFLOW_CLI_CALIBRATE_COMMAND_H_
#define RDMAFLOW_CLI_CALIBRATE_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace rdmaflow::cli {

// `args` excludes "calibrate". Exit status: 0 written, 1 a measurement
// cannot be read or is invalid, 2 a usage error.
int RunCalibrateCommand(const std::vector<std::string>& args, std::ostream& out,
                        std::ostream& err);

std::string CalibrateUsage();

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_CALIBRATE_COMMAND_H_
