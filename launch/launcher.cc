// File: launcher.cc
#include "launch/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "rdma/job_token.h"
#include "rdma/torch/run_scope.h"
#include "rdma/torch/tcp_store.h"

extern "C" char** environ;

namespace rdmaflow::launch {
namespace {

// What the launcher sets in a child itself: never inherited from its own
// environment (a stale RANK there must not leak into a job).
constexpr const char* kLauncherVariables[] = {
    "RANK",        "WORLD_SIZE",  "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", kRejoinVariable, kJobTokenVariable};

// How often the launcher looks at a child it holds no pidfd for (a kernel
// before 5.3). With pidfds it sleeps until a child ends, a deadline comes or
// rank 0 returns: no wake-ups beside a benchmark's rank 0.
constexpr absl::Duration kPollInterval = absl::Milliseconds(5);

// A descriptor that becomes readable when process `pid` ends; -1 if the
// kernel has none.
int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

std::string VariableName(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

// 128 random bits as 32 hex digits.
std::string FreshToken() {
  std::random_device urandom;
  std::string token;
  for (int i = 0; i < 4; ++i) token += absl::StrFormat("%08x", urandom());
  return token;
}

std::string SignalName(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  const char* description = sigdescr_np(signal);
  if (abbreviation == nullptr) return absl::StrCat("signal ", signal);
  return absl::StrCat("signal ", signal, " (SIG", abbreviation,
                      description != nullptr ? absl::StrCat(", ", description) : "",
                      ")");
}

// Forks and executes `program` with `args` and `env`, all converted before
// the fork: the child only calls async-signal-safe functions. It dies with
// the calling thread (PR_SET_PDEATHSIG). An error names the program when it
// cannot be executed (the child reports execve's errno through a pipe that
// closes on a successful exec).
absl::StatusOr<pid_t> Spawn(const std::string& program,
                            const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t launcher = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    close(report[0]);
    close(report[1]);
    return absl::InternalError(
        absl::StrCat("fork: ", std::strerror(error),
                     " (too many processes, or out of memory?)"));
  }
  if (child == 0) {
    close(report[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(127);  // the launcher is gone already
    execve(program.c_str(), argv.data(), envp.data());
    const int error = errno;
    (void)!write(report[1], &error, sizeof(error));
    _exit(127);
  }
  close(report[1]);
  int error = 0;
  ssize_t n;
  do {
    n = read(report[0], &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(error))) {
    waitpid(child, nullptr, 0);
    return absl::InternalError(
        absl::StrCat("cannot execute ", program, ": ", std::strerror(error)));
  }
  return child;
}

class Job {
 public:
  explicit Job(const JobOptions& options) : options_(options) {}
  ~Job();

  JobResult Run();

 private:
  enum class Problem { kNone, kFailure, kDeadline, kStart };

  // Checks the options, settles the token and hosts the store.
  absl::Status Prepare();
  // The environment of child `rank`.
  std::vector<std::string> ChildEnv(int rank, bool rejoining) const;
  // Starts child `rank`; on failure stops the job.
  bool StartChild(int rank, bool rejoining) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps children until none runs, restarting and stopping as the
  // options say.
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  // Child `rank` ended with wait status `status`.
  void OnExit(int rank, int status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank `rank` failed.
  void NoteFailure(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGTERM to every running child, SIGKILL after the grace.
  void StopAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends this process (rank 0 with it) with the job's status.
  [[noreturn]] void StopRank0() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's status, from what was recorded.
  absl::Status Summarize() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobOptions& options_;
  const bool rank0_here_ = static_cast<bool>(options_.rank0);
  std::unique_ptr<rdma::torch::TcpStore> store_;
  std::string token_;
  std::vector<std::string> args_;
  std::vector<std::string> inherited_env_;
  absl::Time deadline_ = absl::InfiniteFuture();

  // Written when rank 0, run here, returns: wakes Watch().
  int wake_fd_ = -1;

  // The watcher thread's and rank 0's (run here) shared record of the job.
  mutable absl::Mutex mu_;
  std::vector<RankExit> ranks_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> running_ ABSL_GUARDED_BY(mu_);    // a child to reap
  std::vector<int> pidfds_ ABSL_GUARDED_BY(mu_);      // of running children; -1: none
  std::vector<int> failures_ ABSL_GUARDED_BY(mu_);    // in the order they were seen
  Problem first_problem_ ABSL_GUARDED_BY(mu_) = Problem::kNone;
  absl::Status start_error_ ABSL_GUARDED_BY(mu_);
  std::vector<int> at_deadline_ ABSL_GUARDED_BY(mu_);  // children running at the deadline
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time kill_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time stop_rank0_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

absl::Status Job::Prepare() {
  const int world = options_.world_size;
  if (world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job needs at least 1 rank, got world_size ", world));
  }
  const int first_child = rank0_here_ ? 1 : 0;
  if (options_.churn.expendable != -1 &&
      (options_.churn.expendable < first_child || options_.churn.expendable >= world)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "churn: the expendable rank must be a child, ", first_child, "..", world - 1,
        ", got ", options_.churn.expendable,
        rank0_here_ ? " (rank 0 runs in the launcher and hosts the store)" : ""));
  }
  if (options_.timeout < absl::ZeroDuration() || options_.grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the job's timeout and grace must be >= 0");
  }
  if (options_.program.empty()) {
    return absl::InvalidArgumentError("no program to run as the ranks");
  }
  for (const auto& [key, value] : options_.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' cannot name an environment variable"));
    }
  }
  // One secret per job: the launcher's own, else a fresh one. Rank 0 run
  // here reads it from this process's environment, as its children do.
  if (auto it = options_.env.find(kJobTokenVariable); it != options_.env.end()) {
    token_ = it->second;
  } else if (const char* token = std::getenv(kJobTokenVariable); token != nullptr) {
    token_ = token;
  } else {
    token_ = FreshToken();
    if (rank0_here_) setenv(kJobTokenVariable, token_.c_str(), 1);
  }
  absl::StatusOr<rdma::JobToken> token =
      rdma::JobTokenFrom([&](absl::string_view name) -> std::optional<std::string> {
        if (name == kJobTokenVariable) return token_;
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      });
  if (!token.ok()) return token.status();
  // Rank 0 run here scopes its keys as its children do (they take the
  // scope from the same environment); a malformed scope fails here once.
  absl::StatusOr<rdma::torch::RunScope> scope = rdma::torch::RunScope::FromEnvironment();
  if (!scope.ok()) return scope.status();
  rdma::torch::TcpStoreOptions store;
  store.port = 0;
  store.is_server = true;
  store.world_size = world;
  store.key_prefix = scope->prefix();
  absl::StatusOr<std::unique_ptr<rdma::torch::TcpStore>> created =
      rdma::torch::TcpStore::Create(store);
  if (!created.ok()) return created.status();
  store_ = std::move(*created);

  args_ = options_.argv;
  if (args_.empty()) args_.push_back(program_invocation_name);
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string name = VariableName(*entry);
    bool own = options_.env.count(name) != 0;
    for (const char* variable : kLauncherVariables) own = own || name == variable;
    if (!own) inherited_env_.push_back(*entry);
  }
  return absl::OkStatus();
}

std::vector<std::string> Job::ChildEnv(int rank, bool rejoining) const {
  std::vector<std::string> env = inherited_env_;
  env.push_back(absl::StrCat("RANK=", rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", options_.world_size));
  env.push_back(absl::StrCat("LOCAL_RANK=", rank));
  env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", options_.world_size));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(absl::StrCat("MASTER_PORT=", store_->port()));
  if (options_.env.count(kJobTokenVariable) == 0) {
    env.push_back(absl::StrCat(kJobTokenVariable, "=", token_));
  }
  if (!rank0_here_) env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
  if (rejoining) env.push_back(absl::StrCat(kRejoinVariable, "=1"));
  for (const auto& [key, value] : options_.env) env.push_back(absl::StrCat(key, "=", value));
  return env;
}

bool Job::StartChild(int rank, bool rejoining) {
  absl::StatusOr<pid_t> pid = Spawn(options_.program, args_, ChildEnv(rank, rejoining));
  if (!pid.ok()) {
    if (first_problem_ == Problem::kNone) {
      first_problem_ = Problem::kStart;
      start_error_ = absl::Status(
          pid.status().code(),
          absl::StrCat("could not start rank ", rank, " of ", options_.world_size, ": ",
                       pid.status().message()));
    }
    StopAll();
    return false;
  }
  RankExit& exit = ranks_[rank];
  exit.pid = *pid;
  exit.started = true;
  exit.exited = false;
  exit.exit_code = 0;
  exit.signal = 0;
  running_[rank] = true;
  pidfds_[rank] = OpenPidfd(*pid);
  return true;
}

Job::~Job() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Job::NoteFailure(int rank) {
  failures_.push_back(rank);
  if (first_problem_ == Problem::kNone) first_problem_ = Problem::kFailure;
  if (!stopping_) StopAll();
}

void Job::StopAll() {
  if (stopping_) return;
  stopping_ = true;
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    if (!running_[rank]) continue;
    kill(ranks_[rank].pid, SIGTERM);
    ranks_[rank].stopped = true;
  }
  kill_at_ = absl::Now() + options_.grace;
}

void Job::StopRank0() {
  ranks_[0].pid = getpid();
  ranks_[0].in_launcher = true;
  ranks_[0].started = true;
  ranks_[0].stopped = true;
  ranks_[0].signal = SIGKILL;
  JobResult result;
  result.status = Summarize();
  result.ranks = ranks_;
  std::fprintf(stderr,
               "local job: rank 0 (run by the launcher) was still running %s after the "
               "other ranks ended; stopping it with the launcher\n"
               "local job: %s\n",
               absl::FormatDuration(options_.stop_rank0_after).c_str(),
               result.status.ToString().c_str());
  std::fflush(nullptr);
  _exit(result.exit_code());
}

void Job::OnExit(int rank, int status) {
  RankExit& exit = ranks_[rank];
  running_[rank] = false;
  exit.exited = WIFEXITED(status);
  exit.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  const Churn& churn = options_.churn;
  if (rank == churn.expendable && exit.signal == SIGKILL && exit.restarts == 0 &&
      !exit.stopped) {
    if (churn.restart && !stopping_) {
      std::fprintf(stderr, "local job: restarting rank %d (it was killed by SIGKILL)\n",
                   rank);
      ++exit.restarts;
      StartChild(rank, /*rejoining=*/true);
      return;
    }
    exit.expendable_death = true;
    return;
  }
  if (!exit.ok() && !exit.stopped) NoteFailure(rank);
}

void Job::Watch() {
  mu_.Lock();
  while (true) {
    bool any = false;
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
      if (!running_[rank]) continue;
      int status = 0;
      const pid_t got = waitpid(ranks_[rank].pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        any = true;
        continue;
      }
      if (pidfds_[rank] >= 0) {
        close(pidfds_[rank]);
        pidfds_[rank] = -1;
      }
      if (got < 0) {
        // Reaped by someone else (SIGCHLD ignored?): the status is lost.
        running_[rank] = false;
        if (!ranks_[rank].stopped) NoteFailure(static_cast<int>(rank));
        continue;
      }
      OnExit(static_cast<int>(rank), status);  // may start it again
      any = any || running_[rank];
    }
    if (!any) {
      if (!rank0_here_ || first_problem_ != Problem::kFailure || ranks_[0].exited ||
          options_.stop_rank0_after == absl::InfiniteDuration()) {
        mu_.Unlock();
        return;
      }
      // Every child is gone after a failure, and rank 0 still runs here:
      // it gets stop_rank0_after to notice, then goes with the process.
      if (stop_rank0_at_ == absl::InfiniteFuture()) {
        stop_rank0_at_ = absl::Now() + options_.stop_rank0_after;
      }
      if (absl::Now() >= stop_rank0_at_) StopRank0();  // does not return
    }
    const absl::Time now = absl::Now();
    if (now >= deadline_ && at_deadline_.empty()) {
      for (size_t rank = 0; rank < ranks_.size(); ++rank) {
        if (running_[rank]) at_deadline_.push_back(static_cast<int>(rank));
      }
      if (first_problem_ == Problem::kNone) first_problem_ = Problem::kDeadline;
      StopAll();
    }
    if (now >= kill_at_) {
      for (size_t rank = 0; rank < ranks_.size(); ++rank) {
        if (running_[rank]) kill(ranks_[rank].pid, SIGKILL);
      }
      kill_at_ = absl::InfiniteFuture();
    }
    // Sleep until a child ends, rank 0 returns, or the next deadline.
    std::vector<pollfd> fds;
    absl::Time wake_at =
        std::min({any && at_deadline_.empty() ? deadline_ : absl::InfiniteFuture(), kill_at_,
                  stop_rank0_at_});
    for (size_t rank = 0; rank < ranks_.size(); ++rank) {
      if (!running_[rank]) continue;
      if (pidfds_[rank] >= 0) {
        fds.push_back({pidfds_[rank], POLLIN, 0});
      } else {
        wake_at = std::min(wake_at, now + kPollInterval);
      }
    }
    if (wake_fd_ >= 0) {
      fds.push_back({wake_fd_, POLLIN, 0});
    } else if (rank0_here_) {
      wake_at = std::min(wake_at, now + kPollInterval);  // no eventfd: look
    }
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(wake_at - now, absl::Milliseconds(1))), 0,
          1 << 30));
    }
    mu_.Unlock();
    poll(fds.data(), fds.size(), timeout_ms);
    if (wake_fd_ >= 0) {  // rank 0 returned: seen now, not to wake us again
      uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    mu_.Lock();
  }
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// What to look at next, for rank exit `exit`.
std::string Hint(const RankExit& exit) {
  if (exit.exited) {
    return exit.in_launcher ? "its error is in the output above"
                            : "its own error is in its output above";
  }
  switch (exit.signal) {
    case 0:
      return "its exit status was reaped elsewhere (is SIGCHLD ignored?)";
    case SIGKILL:
      return "not by the launcher: the OOM killer (see dmesg) or someone's kill -9";
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
      return "a crash: run the rank under gdb, or read its core dump";
    case SIGABRT:
      return "a failed check or an uncaught exception: its output above says which";
    default:
      return "not by the launcher";
  }
}

absl::Status Job::Summarize() const {
  const int world = options_.world_size;
  std::vector<int> stopped;
  for (const RankExit& exit : ranks_) {
    if (exit.stopped) stopped.push_back(exit.rank);
  }
  const std::string stopped_text =
      stopped.empty() ? ""
                      : absl::StrCat("; the launcher stopped ", RankList(stopped),
                                     " (SIGTERM, SIGKILL after ",
                                     absl::FormatDuration(options_.grace), ")");
  switch (first_problem_) {
    case Problem::kNone:
      return absl::OkStatus();
    case Problem::kStart:
      return absl::Status(start_error_.code(),
                          absl::StrCat(start_error_.message(), stopped_text));
    case Problem::kFailure: {
      const RankExit& first = ranks_[failures_.front()];
      std::vector<std::string> later;
      for (size_t i = 1; i < failures_.size(); ++i) {
        later.push_back(ranks_[failures_[i]].Describe());
      }
      return absl::AbortedError(absl::StrCat(
          first.Describe(), " (of ", world, " ranks, the first to fail; ", Hint(first), ")",
          later.empty() ? "" : absl::StrCat("; then ", absl::StrJoin(later, ", ")),
          stopped_text));
    }
    case Problem::kDeadline:
      return absl::DeadlineExceededError(absl::StrCat(
          RankList(at_deadline_), " of ", world, " still ran ",
          absl::FormatDuration(options_.timeout),
          " after the job started (the launcher's deadline)", stopped_text,
          ". A rank waiting for a peer that never came, or a deadlock? Their output "
          "above says what they waited for; a job that is only slow needs a longer "
          "timeout"));
  }
  return absl::InternalError("unreachable");
}

JobResult Job::Run() {
  JobResult result;
  result.status = Prepare();
  if (!result.status.ok()) return result;
  const int world = options_.world_size;
  deadline_ = absl::Now() + options_.timeout;
  bool started = true;
  {
    absl::MutexLock lock(&mu_);
    ranks_.resize(world);
    running_.assign(world, false);
    pidfds_.assign(world, -1);
    for (int rank = 0; rank < world; ++rank) ranks_[rank].rank = rank;
    for (int rank = rank0_here_ ? 1 : 0; rank < world && started; ++rank) {
      started = StartChild(rank, /*rejoining=*/false);
    }
  }
  if (rank0_here_) {
    // The children are watched while rank 0 runs: a restart, or a failure
    // that stops the others, does not wait for rank 0.
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    std::thread watcher([this] { Watch(); });
    if (started) {
      const int code = options_.rank0(*store_);
      absl::MutexLock lock(&mu_);
      RankExit& zero = ranks_[0];
      zero.pid = getpid();
      zero.in_launcher = true;
      zero.started = true;
      zero.exited = true;
      zero.exit_code = code;
      // The others would otherwise wait out their timeouts for rank 0.
      if (code != 0) NoteFailure(0);
    }
    if (wake_fd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
    watcher.join();
  } else {
    Watch();
  }
  absl::MutexLock lock(&mu_);
  result.status = Summarize();
  result.ranks = ranks_;
  return result;
}

}  // namespace

bool RankExit::ok() const { return (exited && exit_code == 0) || expendable_death; }

int RankExit::code() const {
  if (!started) return -1;
  if (exited) return exit_code;
  return 128 + signal;
}

std::string RankExit::Describe() const {
  const std::string who = absl::StrCat("rank ", rank);
  if (!started) return absl::StrCat(who, " was never started");
  if (exited) {
    if (in_launcher) return absl::StrCat(who, " (run by the launcher) returned ", exit_code);
    return absl::StrCat(who, " exited with code ", exit_code);
  }
  if (signal == 0) return absl::StrCat(who, " ended with an unknown status");
  return absl::StrCat(who, " was killed by ", SignalName(signal),
                      expendable_death ? " (the expendable rank: not a failure)" : "");
}

std::vector<int> JobResult::codes() const {
  std::vector<int> codes;
  for (const RankExit& exit : ranks) codes.push_back(exit.code());
  return codes;
}

int JobResult::exit_code() const {
  auto code = [](const RankExit& exit) {
    return exit.exited && exit.exit_code != 0 ? exit.exit_code : 1;
  };
  // A rank the launcher stopped failed because another did: that one's
  // code says more.
  for (bool stopped : {false, true}) {
    for (const RankExit& exit : ranks) {
      if (exit.started && !exit.ok() && exit.stopped == stopped) return code(exit);
    }
  }
  return status.ok() ? 0 : 1;
}

JobResult RunJob(const JobOptions& options) { return Job(options).Run(); }

JobResult LaunchRanks(int world_size, const std::map<std::string, std::string>& env,
                      absl::Duration timeout) {
  JobOptions options;
  options.world_size = world_size;
  options.env = env;
  options.timeout = timeout;
  return RunJob(options);
}

int RunLocalJob(int world_size, char** argv, const std::vector<std::string>& extra_flags,
                const std::function<int(rdma::Store&)>& rank0, const Churn& churn) {
  JobOptions options;
  options.world_size = world_size;
  for (char** arg = argv; *arg != nullptr; ++arg) options.argv.push_back(*arg);
  for (const std::string& flag : extra_flags) options.argv.push_back(flag);
  options.rank0 = rank0;
  options.churn = churn;
  options.stop_rank0_after = options.grace;
  const JobResult result = RunJob(options);
  if (!result.status.ok()) {
    std::fprintf(stderr, "local job: %s\n", result.status.ToString().c_str());
  }
  return result.exit_code();
}

}  // namespace rdmaflow::launch
