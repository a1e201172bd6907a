// File: args.cc
#include "cli/args.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/program_flags.h"

namespace rdmaflow::cli {

std::string ParsedArgs::Get(const std::string& name,
                            std::string fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> ParsedArgs::GetInt(const std::string& name,
                                           int64_t fallback, int64_t min,
                                           int64_t max) const {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", it->second, ": expected an integer in ",
                     min, " .. ", max));
  }
  return value;
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs) {
  ParsedArgs parsed;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_done || arg == "-" || !absl::StartsWith(arg, "-")) {
      parsed.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      continue;
    }
    if (arg == "--version") {
      parsed.version = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", arg, "' (see --help)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    name = CanonicalFlagName(name);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const FlagSpec& s : specs) known.push_back("--" + s.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '--", name, "'; known: ",
                       absl::StrJoin(known, ", "), ", --help, --version"));
    }
    if (!spec->takes_value) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("option --", name, " takes no value"));
      }
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("option --", name, " needs a value"));
      }
      value = args[++i];
    }
    parsed.flags[name] = value;
  }
  return parsed;
}

}  // namespace rdmaflow::cli
