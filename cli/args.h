// File: args.h
// -----------------------------------------------------------------------------
// ParseArgs: the command-line parsing shared by `rdmaflow` subcommands.
// Accepts "--name=value", "--name value", boolean "--name", "-h"/"--help",
// "--version" and positional arguments ("--" ends the options). A flag's
// name is spelled with underscores; the dash spelling is the same flag
// (common/program_flags.h has the whole convention).
#ifndef RDMAFLOW_CLI_ARGS_H_
#define RDMAFLOW_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::cli {

struct FlagSpec {
  std::string name;  // Without the leading "--"; underscores, not dashes.
  bool takes_value = true;
};

// Thread-compatible value type.
struct ParsedArgs {
  std::map<std::string, std::string> flags;  // Boolean flags map to "true".
  std::vector<std::string> positional;
  bool help = false;
  bool version = false;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name, std::string fallback = "") const;
  // kInvalidArgument when the value is not an integer in [min, max].
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback,
                                 int64_t min, int64_t max) const;
};

// kInvalidArgument for an unknown flag (listing the known ones), a missing
// value, or a value given to a boolean flag.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs);

}  // namespace rdmaflow::cli

#endif  // RDMAFLOW_CLI_ARGS_H_
