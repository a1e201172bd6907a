// The local launcher with real processes: this test binary re-executes
// itself per rank (launch/ranks_or_tests_main.h) and each rank does what
// RDMAFLOW_LAUNCH_TEST says. Checked: the environment a rank gets (and
// what it must not inherit), the store it joins, a failing rank named
// with its exit code or signal and the others stopped at once, a hung job
// stopped at the deadline (SIGKILL for a rank that ignores SIGTERM), the
// churn rank's SIGKILL forgiven or restarted once, rank 0 run in the
// launcher, and bad options refused before anything starts.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "launch/ranks_or_tests_main.h"

namespace rdmaflow::launch {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kModeEnv[] = "RDMAFLOW_LAUNCH_TEST";
// "env" mode: where ranks write what they saw.
constexpr char kDirEnv[] = "RDMAFLOW_LAUNCH_TEST_DIR";
// "exit" and "signal" modes: the rank that fails.
constexpr char kFailRankEnv[] = "RDMAFLOW_LAUNCH_TEST_FAIL_RANK";

// Variables a rank reports in "env" mode.
constexpr const char* kReported[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "RDMAFLOW_JOB_TOKEN", "TORCHELASTIC_USE_AGENT_STORE",
    "RDMAFLOW_REJOIN", "RDMAFLOW_LAUNCH_TEST_EXTRA", "RDMAFLOW_LAUNCH_TEST_INHERITED"};

int EnvInt(const char* name) {
  int value = -1;
  const char* text = std::getenv(name);
  if (text == nullptr || !absl::SimpleAtoi(text, &value)) return -1;
  return value;
}

// --- The ranks ------------------------------------------------------------

// Writes the reported variables and the command line to <dir>/rank<R>,
// then meets every other rank in the store.
absl::Status ReportEnvironment() {
  ASSIGN_OR_RETURN(JoinedRank joined, JoinJob());
  std::ofstream out(absl::StrCat(std::getenv(kDirEnv), "/rank", joined.rank));
  for (const char* name : kReported) {
    const char* value = std::getenv(name);
    if (value != nullptr) out << name << "=" << value << "\n";
  }
  std::ifstream cmdline("/proc/self/cmdline");
  std::string arg;
  while (std::getline(cmdline, arg, '\0')) out << "argv=" << arg << "\n";
  out.close();
  RETURN_IF_ERROR(joined.store->Set(absl::StrCat("here/", joined.rank), "1"));
  std::vector<std::string> keys;
  for (int r = 0; r < joined.world_size; ++r) keys.push_back(absl::StrCat("here/", r));
  return joined.store->Wait(keys, absl::Seconds(30));
}

absl::Status RunTestRank(const char* mode_text) {
  const std::string mode = mode_text;
  const int rank = EnvInt("RANK");
  if (mode == "env") return ReportEnvironment();
  if (mode == "exit" || mode == "signal") {
    if (rank == EnvInt(kFailRankEnv)) {
      if (mode == "signal") raise(SIGUSR1);
      std::exit(3);
    }
    absl::SleepFor(absl::Seconds(60));  // until the launcher stops it
    return absl::InternalError("not stopped after another rank failed");
  }
  if (mode == "sleep") {
    absl::SleepFor(absl::Seconds(1));
    return absl::OkStatus();
  }
  if (mode == "hang") {
    absl::SleepFor(absl::Seconds(60));
    return absl::InternalError("not stopped at the deadline");
  }
  if (mode == "churn") {  // rank 1 dies the first time
    if (rank == 1 && !IsRejoining()) raise(SIGKILL);
    return absl::OkStatus();
  }
  if (mode == "hello") {  // rank 0 runs in the launcher and set "hello"
    ASSIGN_OR_RETURN(JoinedRank joined, JoinJob());
    ASSIGN_OR_RETURN(std::string value, joined.store->Get("hello", absl::Seconds(30)));
    if (value != "world") return absl::InternalError(absl::StrCat("hello=", value));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown mode ", mode));
}

// --- The launcher's side --------------------------------------------------

JobOptions Options(int world, const std::string& mode) {
  JobOptions options;
  options.world_size = world;
  options.env = {{kModeEnv, mode}};
  options.timeout = absl::Seconds(60);
  return options;
}

// What rank `rank` reported in "env" mode: NAME -> value, argv -> args.
std::multimap<std::string, std::string> Reported(const std::string& dir, int rank) {
  std::multimap<std::string, std::string> seen;
  std::ifstream in(absl::StrCat(dir, "/rank", rank));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (parts.size() == 2) seen.emplace(parts[0], parts[1]);
  }
  return seen;
}

std::string One(const std::multimap<std::string, std::string>& seen, const std::string& name) {
  auto it = seen.find(name);
  return it == seen.end() ? "<unset>" : it->second;
}

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0700);
  return dir;
}

// Sets a variable of this process for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(LauncherTest, EveryRankGetsItsEnvironmentAndMeetsTheOthersInTheStore) {
  const std::string dir = TestDir("env");
  ScopedEnv token(kJobTokenVariable, nullptr);
  // Stale rank variables of the launcher's own must not reach the ranks.
  ScopedEnv stale_rank("RANK", "7");
  ScopedEnv stale_local("LOCAL_RANK", "7");
  ScopedEnv stale_rejoin(kRejoinVariable, "1");
  ScopedEnv inherited("RDMAFLOW_LAUNCH_TEST_INHERITED", "kept");
  JobOptions options = Options(3, "env");
  options.env[kDirEnv] = dir;
  options.env["RDMAFLOW_LAUNCH_TEST_EXTRA"] = "extra";
  const JobResult result = RunJob(options);
  ASSERT_OK(result.status);
  EXPECT_THAT(result.codes(), Each(0));
  EXPECT_EQ(result.exit_code(), 0);
  std::string job_token;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(rank);
    const auto seen = Reported(dir, rank);
    EXPECT_EQ(One(seen, "RANK"), absl::StrCat(rank));
    EXPECT_EQ(One(seen, "LOCAL_RANK"), absl::StrCat(rank));
    EXPECT_EQ(One(seen, "WORLD_SIZE"), "3");
    EXPECT_EQ(One(seen, "LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(One(seen, "MASTER_ADDR"), "127.0.0.1");
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(One(seen, "MASTER_PORT"), &port) && port > 0);
    // Every rank is a child: the launcher hosts the store.
    EXPECT_EQ(One(seen, "TORCHELASTIC_USE_AGENT_STORE"), "True");
    EXPECT_EQ(One(seen, "RDMAFLOW_REJOIN"), "<unset>");
    EXPECT_EQ(One(seen, "RDMAFLOW_LAUNCH_TEST_EXTRA"), "extra");
    EXPECT_EQ(One(seen, "RDMAFLOW_LAUNCH_TEST_INHERITED"), "kept");
    // A fresh secret, the same on every rank.
    const std::string rank_token = One(seen, "RDMAFLOW_JOB_TOKEN");
    EXPECT_EQ(rank_token.size(), 32u);
    if (rank == 0) job_token = rank_token;
    EXPECT_EQ(rank_token, job_token);
  }
  // The launcher did not export it to itself (its ranks are all children).
  EXPECT_EQ(std::getenv(kJobTokenVariable), nullptr);
  // The next job gets another one.
  ASSERT_OK(RunJob(options).status);
  EXPECT_NE(One(Reported(dir, 1), "RDMAFLOW_JOB_TOKEN"), job_token);
}

TEST(LauncherTest, TheLaunchersOwnJobTokenIsPassedOn) {
  const std::string dir = TestDir("token");
  ScopedEnv token(kJobTokenVariable, "our-secret");
  JobOptions options = Options(2, "env");
  options.env[kDirEnv] = dir;
  ASSERT_OK(RunJob(options).status);
  EXPECT_EQ(One(Reported(dir, 0), "RDMAFLOW_JOB_TOKEN"), "our-secret");
  EXPECT_EQ(One(Reported(dir, 1), "RDMAFLOW_JOB_TOKEN"), "our-secret");
}

TEST(LauncherTest, AMalformedJobTokenOrRunScopeFailsBeforeAnyRankStarts) {
  {
    ScopedEnv token(kJobTokenVariable, "");
    const JobResult result = RunJob(Options(2, "env"));
    EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("RDMAFLOW_JOB_TOKEN")));
    EXPECT_TRUE(result.ranks.empty());
  }
  ScopedEnv run_id("RDMAFLOW_RUN_ID", "not a run id");
  EXPECT_THAT(RunJob(Options(2, "env")).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_RUN_ID")));
}

TEST(LauncherTest, AFailingRankIsNamedWithItsExitCodeAndTheOthersAreStopped) {
  JobOptions options = Options(4, "exit");
  options.env[kFailRankEnv] = "2";
  const absl::Time start = absl::Now();
  const JobResult result = RunJob(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // nobody slept it out
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("rank 2 exited with code 3"),
                             HasSubstr("of 4 ranks, the first to fail"),
                             HasSubstr("stopped ranks 0, 1, 3"))));
  EXPECT_THAT(result.codes(), ElementsAre(128 + SIGTERM, 128 + SIGTERM, 3, 128 + SIGTERM));
  EXPECT_FALSE(result.ranks[2].stopped);
  EXPECT_TRUE(result.ranks[0].stopped);
  EXPECT_EQ(result.exit_code(), 3);
}

TEST(LauncherTest, ARankKilledByASignalIsNamedWithTheSignal) {
  JobOptions options = Options(2, "signal");
  options.env[kFailRankEnv] = "1";
  const JobResult result = RunJob(options);
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 1 was killed by signal 10 (SIGUSR1")));
  EXPECT_THAT(result.codes(), ElementsAre(128 + SIGTERM, 128 + SIGUSR1));
  EXPECT_EQ(result.exit_code(), 1);
}

TEST(LauncherTest, AHungJobIsStoppedAtTheDeadline) {
  JobOptions options = Options(2, "hang");
  options.timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  const JobResult result = RunJob(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("ranks 0, 1 of 2 still ran 500ms"),
                             HasSubstr("the launcher's deadline"))));
  EXPECT_THAT(result.codes(), Each(128 + SIGTERM));
}

TEST(LauncherTest, ARankThatIgnoresSigtermIsKilledAfterTheGrace) {
  // The ranks inherit the ignored SIGTERM: they ignore it from their start.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &old), 0);
  JobOptions options = Options(2, "hang");
  options.timeout = absl::Milliseconds(500);
  options.grace = absl::Milliseconds(500);
  const JobResult result = RunJob(options);
  sigaction(SIGTERM, &old, nullptr);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(result.codes(), Each(128 + SIGKILL));
}

TEST(LauncherTest, TheExpendableRanksSigkillIsNotAFailure) {
  JobOptions options = Options(3, "churn");
  options.churn.expendable = 1;
  const JobResult result = RunJob(options);
  EXPECT_OK(result.status);
  EXPECT_THAT(result.codes(), ElementsAre(0, 128 + SIGKILL, 0));
  EXPECT_TRUE(result.ranks[1].expendable_death);
  EXPECT_EQ(result.exit_code(), 0);
}

TEST(LauncherTest, TheExpendableRankIsRestartedOnceAsRejoining) {
  JobOptions options = Options(3, "churn");
  options.churn = {1, true};
  const JobResult result = RunJob(options);
  EXPECT_OK(result.status);
  EXPECT_THAT(result.codes(), Each(0));
  EXPECT_EQ(result.ranks[1].restarts, 1);
}

TEST(LauncherTest, ASigkillOfAnotherRankIsAFailureNamingTheOomKiller) {
  const JobResult result = RunJob(Options(2, "churn"));
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("rank 1 was killed by signal 9 (SIGKILL"),
                             HasSubstr("OOM killer"))));
}

TEST(LauncherTest, RankZeroRunsInTheLauncherWithTheStore) {
  JobOptions options = Options(3, "hello");
  options.rank0 = [](rdma::Store& store) { return store.Set("hello", "world").ok() ? 0 : 1; };
  const JobResult result = RunJob(options);
  ASSERT_OK(result.status);
  EXPECT_TRUE(result.ranks[0].in_launcher);
  EXPECT_THAT(result.codes(), Each(0));
}

TEST(LauncherTest, RankZeroFailingInTheLauncherStopsTheChildren) {
  JobOptions options = Options(3, "hang");
  options.rank0 = [](rdma::Store&) { return 5; };
  const absl::Time start = absl::Now();
  const JobResult result = RunJob(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("rank 0 (run by the launcher) returned 5"),
                             HasSubstr("stopped ranks 1, 2"))));
  EXPECT_THAT(result.codes(), ElementsAre(5, 128 + SIGTERM, 128 + SIGTERM));
  EXPECT_EQ(result.exit_code(), 5);
}

// Rank 0 in the launcher that does not notice its peers are gone (a wait
// with no liveness check): once the child that failed is gone, the
// launcher gives it stop_rank0_after, then ends the process with the job's
// status and the failing rank's exit code, as RunLocalJob (rdmaflow_train
// --local) does with its grace.
TEST(LauncherTest, RankZeroStillWaitingAfterAFailureGoesWithTheLauncher) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        JobOptions options = Options(2, "exit");
        options.env[kFailRankEnv] = "1";
        options.stop_rank0_after = absl::Seconds(1);
        options.rank0 = [](rdma::Store&) {
          absl::SleepFor(absl::Seconds(120));  // a wait that never notices
          return 0;
        };
        RunJob(options);
        std::exit(99);  // not reached: the launcher ended the process
      },
      ::testing::ExitedWithCode(3),
      "rank 0 \\(run by the launcher\\) was still running 1s after the other ranks "
      "ended.*rank 1 exited with code 3");
}

absl::Duration CpuTime() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
}

TEST(LauncherTest, TheLauncherSleepsWhileItsRanksRun) {
  for (bool rank0_here : {false, true}) {
    SCOPED_TRACE(rank0_here ? "rank 0 in the launcher" : "every rank a child");
    JobOptions options = Options(3, "sleep");
    if (rank0_here) options.rank0 = [](rdma::Store&) { return 0; };  // returns at once
    const absl::Duration cpu = CpuTime();
    const absl::Time start = absl::Now();
    ASSERT_OK(RunJob(options).status);
    EXPECT_GE(absl::Now() - start, absl::Seconds(1));
    // Polling would cost about the second the ranks sleep.
    EXPECT_LT(CpuTime() - cpu, absl::Milliseconds(300));
  }
}

TEST(LauncherTest, RunLocalJobPassesTheCommandLineAndExportsTheToken) {
  const std::string dir = TestDir("local_job");
  ScopedEnv token(kJobTokenVariable, nullptr);
  ScopedEnv mode(kModeEnv, "env");  // the children inherit it
  ScopedEnv where(kDirEnv, dir.c_str());
  std::vector<std::string> args = {"launcher_test", "--flag=1"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int code = RunLocalJob(3, argv.data(), {"--extra=2"}, [](rdma::Store& store) {
    // Rank 0 meets the children as ReportEnvironment does.
    if (!store.Set("here/0", "1").ok()) return 1;
    return store.Wait({"here/1", "here/2"}, absl::Seconds(30)).ok() ? 0 : 1;
  });
  EXPECT_EQ(code, 0);
  // Rank 0 here reads the job's secret from this process's environment.
  ASSERT_NE(std::getenv(kJobTokenVariable), nullptr);
  for (int rank = 1; rank < 3; ++rank) {
    SCOPED_TRACE(rank);
    const auto seen = Reported(dir, rank);
    EXPECT_EQ(One(seen, "RANK"), absl::StrCat(rank));
    EXPECT_EQ(One(seen, "RDMAFLOW_JOB_TOKEN"), std::getenv(kJobTokenVariable));
    // Rank 0 hosts the store.
    EXPECT_EQ(One(seen, "TORCHELASTIC_USE_AGENT_STORE"), "<unset>");
    std::vector<std::string> child_argv;
    for (auto [it, end] = seen.equal_range("argv"); it != end; ++it) {
      child_argv.push_back(it->second);
    }
    EXPECT_THAT(child_argv, ElementsAre("launcher_test", "--flag=1", "--extra=2"));
  }
}

TEST(LauncherTest, RunLocalJobReturnsTheFailingChildsCode) {
  ScopedEnv mode(kModeEnv, "exit");
  ScopedEnv fail(kFailRankEnv, "1");
  std::vector<std::string> args = {"launcher_test"};
  char* argv[] = {args[0].data(), nullptr};
  // Rank 0 waits for the children to be done with the store.
  const int code = RunLocalJob(2, argv, {}, [](rdma::Store&) { return 0; });
  EXPECT_EQ(code, 3);
}

TEST(LauncherTest, BadOptionsAreRefusedBeforeAnythingStarts) {
  EXPECT_THAT(RunJob(Options(0, "env")).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size 0")));
  JobOptions rank0_expendable = Options(2, "env");
  rank0_expendable.rank0 = [](rdma::Store&) { return 0; };
  rank0_expendable.churn.expendable = 0;
  EXPECT_THAT(RunJob(rank0_expendable).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the expendable rank must be a child, 1..1")));
  JobOptions bad_env = Options(2, "env");
  bad_env.env["A=B"] = "1";
  EXPECT_THAT(RunJob(bad_env).status, StatusIs(absl::StatusCode::kInvalidArgument));
  JobOptions bad_timeout = Options(2, "env");
  bad_timeout.timeout = -absl::Seconds(1);
  EXPECT_THAT(RunJob(bad_timeout).status, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LauncherTest, AProgramThatCannotRunIsNamed) {
  JobOptions options = Options(3, "env");
  options.program = "/nonexistent/rank";
  const JobResult result = RunJob(options);
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("could not start rank 0 of 3"),
                             HasSubstr("/nonexistent/rank: No such file or directory"))));
  EXPECT_THAT(result.codes(), Each(-1));
  EXPECT_NE(result.exit_code(), 0);
}

}  // namespace
}  // namespace rdmaflow::launch

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(argc, argv, rdmaflow::launch::kModeEnv,
                                            rdmaflow::launch::RunTestRank);
}
