// File: rdmaflow_main.cc
// -----------------------------------------------------------------------------
// The `rdmaflow` command: one binary, one subcommand per job.
//
//   rdmaflow plan GRAPH [options]   plan a dataflow graph's transfers
//   rdmaflow --help
#include <iostream>
#include <string>
#include <vector>

#include "cli/plan_command.h"

namespace {

constexpr char kUsage[] = R"(usage: rdmaflow COMMAND [options]

rdmaflow: an RDMA dataflow communication substrate for tensor graphs.

commands:
  plan GRAPH    validate a dataflow graph, infer shapes, partition it by rank
                and print the transfer plan (registered regions, slots)

run 'rdmaflow COMMAND --help' for a command's options.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" ||
      args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "plan") {
    return rdmaflow::cli::RunPlanCommand(args, std::cout, std::cerr);
  }
  std::cerr << "rdmaflow: unknown command '" << command
            << "' (known: plan; see rdmaflow --help)\n";
  return 2;
}
