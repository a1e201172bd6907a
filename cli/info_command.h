// File: info_command.h
// -----------------------------------------------------------------------------
// `rdmaflow info`: what this machine offers rdmaflow, as ucx_info and
// ibv_devinfo do for their libraries: each transport and what it found
// (UCX's transports and devices, RDMA devices with their ports and GIDs),
// the memlock limit, the GPUs and the PyTorch rdmaflow_torch is built for,
// with a line of advice for each missing piece.
#ifndef RDMAFLOW_CLI_INFO_COMMAND_H_
#define RDMAFLOW_CLI_INFO_COMMAND_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace rdmaflow::cli {

// The advice for a memlock limit of `bytes` (nullopt: unlimited), or "" when
// it is enough. Registered memory is pinned, and the limit caps it for
// ibverbs and for UCX's RDMA transports.
std::string MemlockAdvice(std::optional<uint64_t> bytes);

std::string InfoUsage();

// Runs `rdmaflow info` with the arguments after "info"; returns the exit
// status (0, or 2 for a usage error).
int RunInfoCommand(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err);

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_INFO_COMMAND_H_
