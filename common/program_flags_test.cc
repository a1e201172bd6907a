// File: program_flags_test.cc
#include "common/program_flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "common/status_matchers.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int64_t, max_bytes, 64, "Largest message, in bytes.");
ABSL_FLAG(bool, quiet, false, "Print only the table.");
ABSL_FLAG(std::string, out, "", "Where the JSON goes.");
ABSL_FLAG(int, peer_fd, -1, "(internal) the pipe a child rank reads.");

namespace rdmaflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::rdmaflow::testing::StatusIs;

class ProgramFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_max_bytes, 64);
    absl::SetFlag(&FLAGS_quiet, false);
    absl::SetFlag(&FLAGS_out, "");
  }
};

TEST_F(ProgramFlagsTest, DashesAndUnderscoresNameOneFlag) {
  ASSERT_OK(SetProgramFlags({"--max-bytes=128"}).status());
  EXPECT_EQ(absl::GetFlag(FLAGS_max_bytes), 128);
  ASSERT_OK(SetProgramFlags({"--max_bytes", "256"}).status());
  EXPECT_EQ(absl::GetFlag(FLAGS_max_bytes), 256);
  EXPECT_EQ(CanonicalFlagName("pipeline-depth"), "pipeline_depth");
}

TEST_F(ProgramFlagsTest, BooleansTakeEveryAbseilSpellingAndNoDash) {
  ASSERT_OK(SetProgramFlags({"--quiet"}).status());
  EXPECT_TRUE(absl::GetFlag(FLAGS_quiet));
  ASSERT_OK(SetProgramFlags({"--no-quiet"}).status());
  EXPECT_FALSE(absl::GetFlag(FLAGS_quiet));
  ASSERT_OK(SetProgramFlags({"--quiet=true"}).status());
  ASSERT_OK(SetProgramFlags({"--noquiet"}).status());
  EXPECT_FALSE(absl::GetFlag(FLAGS_quiet));
  EXPECT_THAT(SetProgramFlags({"--no-quiet=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("takes no value")));
}

TEST_F(ProgramFlagsTest, PositionalArgumentsAndTheEndOfFlags) {
  absl::StatusOr<std::vector<std::string>> positional =
      SetProgramFlags({"graph.json", "--out", "x.json", "-", "--", "--quiet"});
  ASSERT_OK(positional.status());
  EXPECT_THAT(*positional, ElementsAre("graph.json", "-", "--quiet"));
  EXPECT_EQ(absl::GetFlag(FLAGS_out), "x.json");
  EXPECT_FALSE(absl::GetFlag(FLAGS_quiet));
}

TEST_F(ProgramFlagsTest, UsageErrorsNameTheFlag) {
  EXPECT_THAT(SetProgramFlags({"--max_byte=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown flag --max_byte")));
  EXPECT_THAT(SetProgramFlags({"--max-bytes=abc"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--max_bytes=abc")));
  EXPECT_THAT(SetProgramFlags({"--out"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--out needs a value")));
  EXPECT_THAT(SetProgramFlags({"-q"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown option")));
  // Abseil's own flags are not this program's.
  EXPECT_THAT(SetProgramFlags({"--flagfile=/etc/passwd"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown flag --flagfile")));
  EXPECT_EQ(absl::GetFlag(FLAGS_max_bytes), 64);
}

TEST_F(ProgramFlagsTest, HelpListsTheProgramsFlagsButNotInternalOnes) {
  std::string help = ProgramFlagsHelp("usage: demo [flags]");
  EXPECT_TRUE(absl::StartsWith(help, "usage: demo [flags]\n"));
  EXPECT_THAT(help, HasSubstr("--max_bytes (default 64)"));
  EXPECT_THAT(help, HasSubstr("Largest message, in bytes."));
  EXPECT_THAT(help, HasSubstr("--out (default \"\")"));
  EXPECT_THAT(help, Not(HasSubstr("peer_fd")));
  EXPECT_THAT(help, Not(HasSubstr("flagfile")));
  EXPECT_THAT(help, HasSubstr(std::string(Version())));
  EXPECT_THAT(help, HasSubstr(kExitStatusHelp));
}

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return argv;
}

using ProgramFlagsDeathTest = ProgramFlagsTest;

TEST_F(ProgramFlagsDeathTest, HelpAndVersionExitZeroAndUsageErrorsTwo) {
  std::vector<std::string> help = {"/x/demo", "--max_bytes=abc", "-h"};
  EXPECT_EXIT(ParseProgramFlags(3, Argv(help).data(), "usage: demo"),
              ::testing::ExitedWithCode(0), "");
  std::vector<std::string> version = {"/x/demo", "--version"};
  EXPECT_EXIT(ParseProgramFlags(2, Argv(version).data(), "usage: demo"),
              ::testing::ExitedWithCode(0), "");
  std::vector<std::string> bad = {"/x/demo", "--max-bytes=-"};
  EXPECT_EXIT(ParseProgramFlags(2, Argv(bad).data(), "usage: demo"),
              ::testing::ExitedWithCode(kExitUsage),
              "demo: --max_bytes=-: .* \\(see demo --help\\)");
}

TEST_F(ProgramFlagsTest, ParseSetsTheFlagsAndNamesTheProgram) {
  std::vector<std::string> args = {"/x/demo", "--max-bytes", "9", "--quiet"};
  ParseProgramFlags(4, Argv(args).data(), "usage: demo");
  EXPECT_EQ(absl::GetFlag(FLAGS_max_bytes), 9);
  EXPECT_TRUE(absl::GetFlag(FLAGS_quiet));
  EXPECT_EQ(ProgramName(), "demo");
}

TEST_F(ProgramFlagsDeathTest, PositionalArgumentsAreUsageErrors) {
  std::vector<std::string> args = {"/x/demo", "--quiet", "stray"};
  EXPECT_EXIT(ParseProgramFlags(3, Argv(args).data(), "usage: demo"),
              ::testing::ExitedWithCode(kExitUsage),
              "demo: unexpected argument 'stray'");
}

}  // namespace
}  // namespace rdmaflow
