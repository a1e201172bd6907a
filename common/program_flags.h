// File: program_flags.h
// -----------------------------------------------------------------------------
// The command-line convention every rdmaflow program keeps (docs/cli.md):
//
//   * a flag's name is spelled with underscores, and the same name with
//     dashes is the same flag: --max_bytes and --max-bytes;
//   * --help (or -h) prints the usage and the program's flags to stdout and
//     exits 0; --version prints "PROGRAM VERSION" and exits 0;
//   * the exit status is 0 when the run succeeded, 1 when it failed at run
//     time, 2 for a usage error (an unknown flag, a missing, unparsable or
//     out-of-range value), with a message on stderr naming the flag.
//
// ParseProgramFlags applies it to the programs whose flags are Abseil flags;
// `rdmaflow`'s subcommands use cli::ParseArgs, which keeps the same rules.
#ifndef RDMAFLOW_COMMON_PROGRAM_FLAGS_H_
#define RDMAFLOW_COMMON_PROGRAM_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The line every --help ends with.
inline constexpr char kExitStatusHelp[] =
    "exit status: 0 success, 1 failure at run time, 2 usage error";

// "max-bytes" and "max_bytes" name one flag: its canonical (underscore) form.
std::string CanonicalFlagName(absl::string_view name);

// Sets the Abseil flags that `args` (argv without argv[0]) name, and returns
// the positional arguments ("--" ends the flags). --name=value and
// --name value set a flag; a boolean flag takes --name, --noname,
// --no-name or --name=true|false. kInvalidArgument, naming the flag, for an
// unknown flag, a missing value, or a value the flag's type refuses; flags
// set before the error keep their new values. Help and version are not
// flags here: ParseProgramFlags answers them first.
absl::StatusOr<std::vector<std::string>> SetProgramFlags(
    const std::vector<std::string>& args);

// The help text: `usage`, then each flag defined outside Abseil (sorted, with
// its default and help; a flag whose help starts with "(internal)" is left
// out), --help and --version, and the exit statuses.
std::string ProgramFlagsHelp(absl::string_view usage);

// The whole convention for an Abseil-flag program's main(), in place of
// absl::ParseCommandLine: answers --help and --version (exit 0), sets the
// flags, and on a usage error (including any positional argument: these
// programs take none) prints "PROGRAM: <what> (see PROGRAM --help)" to
// stderr and exits 2.
void ParseProgramFlags(int argc, char** argv, absl::string_view usage);

// The same for a program that takes positional arguments: returns them
// (without argv[0]) for the program to check.
std::vector<std::string> ParseProgramArgs(int argc, char** argv,
                                          absl::string_view usage);

// Prints "PROGRAM: <message> (see PROGRAM --help)" to stderr and exits 2.
[[noreturn]] void ExitWithUsageError(absl::string_view message);

// The program's name as users typed it, for messages: argv[0]'s basename.
// Empty before ParseProgramFlags ran.
const std::string& ProgramName();

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_PROGRAM_FLAGS_H_
