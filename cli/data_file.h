// File: data_file.h
// -----------------------------------------------------------------------------
// FindDataFile: where a file of the source tree that a command reads by
// default (docs/scale/calibration.json, ...) is, wherever the command runs
// from: the working directory, then the workspace `bazel run` names
// (BUILD_WORKSPACE_DIRECTORY), then each folder above the executable (a
// bazel-bin binary's execroot links the source tree's folders).
#ifndef RDMAFLOW_CLI_DATA_FILE_H_
#define RDMAFLOW_CLI_DATA_FILE_H_

#include <optional>
#include <string>

namespace rdmaflow::cli {

// The path of `relative` (e.g. "docs/scale/calibration.json") in the first
// of those places that has it as a regular file; nullopt if none does.
std::optional<std::string> FindDataFile(const std::string& relative);

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_DATA_FILE_H_
