// File: program_flags.cc
#include "common/program_flags.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/version.h"

namespace rdmaflow {
namespace {

std::string& MutableProgramName() {
  static std::string* name = new std::string();
  return *name;
}

bool IsHelp(absl::string_view arg) {
  return arg == "-h" || arg == "--help" || arg == "-help" ||
         arg == "--helpfull";
}

// Abseil's own flags (--flagfile, --fromenv, ...) and retired ones are not
// this program's.
bool IsProgramFlag(const absl::CommandLineFlag& flag) {
  return !flag.IsRetired() && !absl::StrContains(flag.Filename(), "absl/");
}

absl::CommandLineFlag* FindProgramFlag(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && IsProgramFlag(*flag) ? flag : nullptr;
}

// The boolean flag that "--noNAME" or "--no-NAME" turns off, or null.
absl::CommandLineFlag* NegatedBool(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "no")) return nullptr;
  absl::ConsumePrefix(&name, "_");
  absl::CommandLineFlag* flag = FindProgramFlag(name);
  return flag != nullptr && flag->IsOfType<bool>() ? flag : nullptr;
}

// Sets the flags `args` name; the indices of the positional arguments.
absl::StatusOr<std::vector<size_t>> SetFlags(
    const std::vector<std::string>& args) {
  std::vector<size_t> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) positional.push_back(i);
      break;
    }
    if (arg == "-" || !absl::StartsWith(arg, "-")) {
      positional.push_back(i);
      continue;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option '", arg, "' (flags start with two dashes)"));
    }
    std::vector<absl::string_view> parts = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const std::string name = CanonicalFlagName(parts[0]);
    const bool has_value = parts.size() == 2;
    std::string value = has_value ? std::string(parts[1]) : std::string();
    absl::CommandLineFlag* flag = FindProgramFlag(name);
    if (flag == nullptr) {
      flag = NegatedBool(name);
      if (flag == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag --", parts[0]));
      }
      if (has_value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name, " takes no value (it turns --", flag->Name(),
            " off)"));
      }
      value = "false";
    } else if (!has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->Name(), "=", value, ": ", error));
    }
  }
  return positional;
}

// `text` folded at about 76 columns, each line indented by `indent`.
std::string Fold(absl::string_view text, absl::string_view indent) {
  std::string out;
  for (absl::string_view paragraph : absl::StrSplit(text, '\n')) {
    std::string line(indent);
    for (absl::string_view word :
         absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      if (line.size() > indent.size() && line.size() + 1 + word.size() > 76) {
        absl::StrAppend(&out, line, "\n");
        line = std::string(indent);
      }
      if (line.size() > indent.size()) line += ' ';
      absl::StrAppend(&line, word);
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace

std::string CanonicalFlagName(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

absl::StatusOr<std::vector<std::string>> SetProgramFlags(
    const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<size_t>> positions = SetFlags(args);
  if (!positions.ok()) return positions.status();
  std::vector<std::string> positional;
  for (size_t i : *positions) positional.push_back(args[i]);
  return positional;
}

std::string ProgramFlagsHelp(absl::string_view usage) {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsProgramFlag(*flag) && !absl::StartsWith(flag->Help(), "(internal)")) {
      flags.push_back(flag);
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out(usage);
  if (!absl::EndsWith(out, "\n")) out += '\n';
  absl::StrAppend(&out,
                  "\nflags (--max_bytes may also be spelled --max-bytes):\n");
  for (const absl::CommandLineFlag* flag : flags) {
    std::string default_value = flag->DefaultValue();
    if (default_value.empty()) default_value = "\"\"";
    absl::StrAppend(&out, "  --", flag->Name(), " (default ", default_value,
                    ")\n", Fold(flag->Help(), "      "));
  }
  absl::StrAppend(&out, "  --help, -h\n      print this help and exit\n",
                  "  --version\n      print the version (", Version(),
                  ") and exit\n\n", kExitStatusHelp, "\n");
  return out;
}

std::vector<std::string> ParseProgramArgs(int argc, char** argv,
                                          absl::string_view usage) {
  std::string program = argc > 0 ? argv[0] : "rdmaflow";
  if (size_t slash = program.rfind('/'); slash != std::string::npos) {
    program = program.substr(slash + 1);
  }
  MutableProgramName() = program;
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (IsHelp(arg)) {
      std::cout << ProgramFlagsHelp(usage);
      std::exit(kExitOk);
    }
    if (arg == "--version") {
      std::cout << program << " " << Version() << "\n";
      std::exit(kExitOk);
    }
  }
  absl::StatusOr<std::vector<std::string>> positional = SetProgramFlags(args);
  if (!positional.ok()) ExitWithUsageError(positional.status().message());
  return *std::move(positional);
}

void ParseProgramFlags(int argc, char** argv, absl::string_view usage) {
  std::vector<std::string> positional = ParseProgramArgs(argc, argv, usage);
  if (!positional.empty()) {
    ExitWithUsageError(absl::StrCat("unexpected argument '", positional.front(),
                                    "' (this program takes flags only)"));
  }
}

void ExitWithUsageError(absl::string_view message) {
  const std::string& program = ProgramName();
  std::cerr << program << ": " << message << " (see " << program
            << " --help)\n";
  std::exit(kExitUsage);
}

const std::string& ProgramName() { return MutableProgramName(); }

}  // namespace rdmaflow
