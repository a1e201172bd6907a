// File: ranks_or_tests_main.h
// -----------------------------------------------------------------------------
// main() of a multi-process test: the test binary is the launcher (it hosts
// the TCPStore, as torchrun's agent does, through LaunchRanks in
// launch/launcher.h) and re-executes itself once per rank with RANK and the
// test's own variables set; the child's main() sees them and runs the rank
// instead of the tests.
//
//   TEST(MyTest, ThreeRanks) {
//     EXPECT_OK(launch::LaunchRanks(3, {{kCaseEnv, "exchange"}}).status);
//   }
//   int main(int argc, char** argv) {
//     return launch::RanksOrTestsMain(argc, argv, kCaseEnv, RunRank);
//   }
#ifndef RDMAFLOW_LAUNCH_RANKS_OR_TESTS_MAIN_H_
#define RDMAFLOW_LAUNCH_RANKS_OR_TESTS_MAIN_H_

#include <functional>

#include "absl/status/status.h"

namespace rdmaflow::launch {

// In a launched rank (RANK and `env` set): runs `rank(getenv(env))` and
// returns 0, or prints "rank R: <error>" and returns 1. Otherwise runs the
// tests (gmock's flags parsed from argv).
int RanksOrTestsMain(int argc, char** argv, const char* env,
                     const std::function<absl::Status(const char* value)>& rank);

}  // namespace rdmaflow::launch

#endif  // RDMAFLOW_LAUNCH_RANKS_OR_TESTS_MAIN_H_
