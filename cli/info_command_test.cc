// File: info_command_test.cc
#include "cli/info_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Result {
  int status;
  std::string out, err;
};

Result RunInfo(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = RunInfoCommand(args, out, err);
  return {status, out.str(), err.str()};
}

TEST(InfoCommandTest, ReportsEveryTransportAndTheGpus) {
  Result r = RunInfo({});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rdmaflow " + std::string(Version())));
  EXPECT_THAT(r.out, HasSubstr("for PyTorch "));
  EXPECT_THAT(r.out, HasSubstr("memlock limit: "));
  // UCX always lists its self and shared-memory transports on Linux.
  EXPECT_THAT(r.out, HasSubstr("  ucx: usable\n    UCX "));
  EXPECT_THAT(r.out, HasSubstr("transport self: "));
  EXPECT_THAT(r.out, HasSubstr("  ibverbs: "));
  EXPECT_THAT(r.out, HasSubstr("  loopback: usable"));
  EXPECT_THAT(r.out, HasSubstr("GPUs (device memory"));
  EXPECT_THAT(r.out, HasSubstr("\nadvice:\n"));
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(InfoCommandTest, TheMemlockLimitGetsAdviceOnlyWhenItIsSmall) {
  EXPECT_EQ(MemlockAdvice(std::nullopt), "");
  EXPECT_EQ(MemlockAdvice(uint64_t{1} << 30), "");
  EXPECT_THAT(MemlockAdvice(uint64_t{8} << 20),
              HasSubstr("the memlock limit (8 MiB) caps registered memory"));
  EXPECT_THAT(MemlockAdvice(uint64_t{64} << 10), HasSubstr("(64 KiB)"));
}

TEST(InfoCommandTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunInfo({"--help"}).status, 0);
  EXPECT_THAT(RunInfo({"--help"}).out, HasSubstr("usage: rdmaflow info"));
  Result r = RunInfo({"--verbose"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option '--verbose'"));
  r = RunInfo({"ucx"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("takes no arguments"));
}

}  // namespace
}  // namespace rdmaflow::cli
