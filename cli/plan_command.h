// File: plan_command.h
// -----------------------------------------------------------------------------
// `rdmaflow plan GRAPH [options]`: reads a graph, plans it, prints the plan's
// tables, and optionally writes the plan, a Graphviz DOT view and the
// per-rank partitioned graphs. `rdmaflow plan --help` documents the options.
#ifndef RDMAFLOW_CLI_PLAN_COMMAND_H_
#define RDMAFLOW_CLI_PLAN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace rdmaflow::cli {

// `args` excludes "plan" itself. Returns the exit status: 0 on success, 1 when
// the graph or plan is invalid or a file cannot be read or written, 2 on a
// usage error. Output goes to `out`, errors to `err`.
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err);

// The text `rdmaflow plan --help` prints.
std::string PlanUsage();

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_PLAN_COMMAND_H_
