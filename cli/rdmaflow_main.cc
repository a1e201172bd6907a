// File: rdmaflow_main.cc
// -----------------------------------------------------------------------------
// The `rdmaflow` command: one binary, one subcommand per job.
//
//   rdmaflow plan GRAPH [options]   plan a dataflow graph's transfers
//   rdmaflow simulate [options]     predict step times (docs/scale.md)
//   rdmaflow calibrate [options]    the simulator's calibration
//   rdmaflow info                   what this machine offers rdmaflow
//   rdmaflow --help | --version
#include <iostream>
#include <string>
#include <vector>

#include "cli/calibrate_command.h"
#include "cli/info_command.h"
#include "cli/plan_command.h"
#include "cli/simulate_command.h"
#include "common/program_flags.h"
#include "common/version.h"

namespace {

constexpr char kUsage[] = R"(usage: rdmaflow COMMAND [options]

rdmaflow: an RDMA dataflow communication substrate for tensor graphs.

commands:
  plan GRAPH    validate a dataflow graph, infer shapes, partition it by rank
                and print the transfer plan (registered regions, slots)
  simulate      predict the training step of each strategy at any rank count
                and link, from this machine's calibration (docs/scale.md)
  calibrate     build that calibration from measurements
                (tools/calibrate_sim.sh runs them)
  info          what this machine offers rdmaflow: transports and their
                devices, memlock limit, GPUs, with advice for what is missing

run 'rdmaflow COMMAND --help' for a command's options; 'rdmaflow --version'
prints the version. Flags are spelled with underscores (--max_input_bytes);
the dash spelling (--max-input-bytes) is the same flag.

exit status: 0 success, 1 failure at run time, 2 usage error
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return rdmaflow::kExitUsage;
  }
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return rdmaflow::kExitOk;
  }
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--version") {
      std::cout << "rdmaflow " << rdmaflow::Version() << "\n";
      return rdmaflow::kExitOk;
    }
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "plan") {
    return rdmaflow::cli::RunPlanCommand(args, std::cout, std::cerr);
  }
  if (command == "simulate") {
    return rdmaflow::cli::RunSimulateCommand(args, std::cout, std::cerr);
  }
  if (command == "calibrate") {
    return rdmaflow::cli::RunCalibrateCommand(args, std::cout, std::cerr);
  }
  if (command == "info") {
    return rdmaflow::cli::RunInfoCommand(args, std::cout, std::cerr);
  }
  std::cerr << "rdmaflow: unknown command '" << command
            << "' (known: plan, simulate, calibrate, info; see rdmaflow --help)\n";
  return rdmaflow::kExitUsage;
}
