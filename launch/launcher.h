// File: launcher.h
// -----------------------------------------------------------------------------
// The local launcher: starts the N ranks of a job as processes on this
// machine, the way torchrun does, and watches them. Every rank is this
// binary (/proc/self/exe) re-executed with the variables a rank reads
// (launch/rank.h joins the job from them):
//
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE   which rank of how many
//   MASTER_ADDR=127.0.0.1, MASTER_PORT               the job's TCPStore, which
//                                                    this process hosts
//   RDMAFLOW_JOB_TOKEN                               the job's secret: the
//        launcher's own if set (checked first), else a fresh random one per job
//   TORCHELASTIC_USE_AGENT_STORE=True                when rank 0 is a child too
//                                                    (this process hosts the
//                                                    store, as torchrun's agent)
//   RDMAFLOW_REJOIN=1                                only in a restarted rank
//
// plus JobOptions::env. Everything else is inherited, so a job's run scope
// (RDMAFLOW_RUN_ID, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT; see
// rdma/torch/run_scope.h) is the launcher's: rank 0 run here and the
// children scope their keys alike. Stale rank variables in the launcher's
// own environment are never passed on.
//
// Two shapes of job:
//   * RunJob with JobOptions::rank0 set (benchmarks, rdmaflow_train --local):
//     this process is rank 0 and runs rank0(store) while ranks 1..N-1 run as
//     children;
//   * RunJob without it, or LaunchRanks (multi-process tests): every rank is
//     a child; this process only hosts the store and watches.
//
// Watching: the first rank that fails (exits non-zero, or dies of a signal
// it did not expect) makes the launcher stop the others (SIGTERM, then
// SIGKILL after JobOptions::grace), so nobody waits out its timeouts for a
// dead peer; past JobOptions::timeout every child still running is stopped
// the same way; rank 0 run here is stopped with the launcher's process when
// JobOptions::stop_rank0_after says so. The result names the rank that
// failed first and how, with what to look at next. Under torchrun, mpirun or Slurm a tool skips all of
// this and joins the job from the environment (launch/rank.h).
//
// The launcher sleeps while its ranks run (a pidfd per child, no polling
// beside a benchmark's rank 0). Children die with the launcher
// (PR_SET_PDEATHSIG), so a killed test or benchmark leaves no ranks behind.
#ifndef RDMAFLOW_LAUNCH_LAUNCHER_H_
#define RDMAFLOW_LAUNCH_LAUNCHER_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rdma/store.h"

namespace rdmaflow::launch {

// Set to "1" in the environment of a rank the launcher restarted (Churn).
inline constexpr char kRejoinVariable[] = "RDMAFLOW_REJOIN";
// The job's secret (rdma/job_token.h).
inline constexpr char kJobTokenVariable[] = "RDMAFLOW_JOB_TOKEN";

// Churn experiments: rank `expendable` (a child, so >= 1 when rank 0 runs
// in the launcher) killed by SIGKILL does not count as failing and stops
// nobody; with `restart`, it is started again (once) with RDMAFLOW_REJOIN=1
// and then counts like the others. Value type.
struct Churn {
  int expendable = -1;  // -1: none
  bool restart = false;
};

// What to start. Value type.
struct JobOptions {
  int world_size = 0;  // 1 and more (2 and more with rank0)
  // The children's argument vector, argv[0] first; empty: just the
  // program's name. The program run is `program`.
  std::vector<std::string> argv;
  std::string program = "/proc/self/exe";
  // Added to every child's environment last (they win over the variables
  // above).
  std::map<std::string, std::string> env;
  // When set, this process is rank 0: rank0(store) runs here, on the
  // calling thread, with the store the launcher hosts; its return value is
  // rank 0's exit code. When empty, rank 0 is a child like the others.
  std::function<int(rdma::Store& store)> rank0;
  // From the start of the job; past it, the children still running are
  // stopped and the job fails kDeadlineExceeded. (Rank 0 run here cannot be
  // stopped: it ends on its own timeouts once its peers are gone.)
  absl::Duration timeout = absl::InfiniteDuration();
  // Between SIGTERM and SIGKILL when the launcher stops a rank.
  absl::Duration grace = absl::Seconds(5);
  // With rank0: once a child failed and every child has ended, how long
  // rank 0 may still run (its own liveness checks end its waits on dead
  // peers well within this; a store wait may not) before the launcher
  // ends this whole process with the job's status and exit code, as it
  // would stop a child. Infinite: rank 0 always returns on its own (the
  // multi-process tests, whose process must survive the job).
  absl::Duration stop_rank0_after = absl::InfiniteDuration();
  Churn churn;
};

// How one rank ended. Value type.
struct RankExit {
  int rank = 0;
  pid_t pid = -1;            // -1: never started
  bool in_launcher = false;  // JobOptions::rank0, run by the launcher
  bool started = false;
  bool exited = false;       // ended by exit() (or rank0 returned)
  int exit_code = 0;         // when exited
  int signal = 0;            // > 0: killed by this signal
  bool stopped = false;      // the launcher signalled it (a failure elsewhere
                             // or the deadline) before it ended
  bool expendable_death = false;  // Churn's rank killed by SIGKILL (not a failure)
  int restarts = 0;          // Churn's restart: 1 once started again

  // Exited with 0, or an expendable death.
  bool ok() const;
  // The shell's convention: the exit code, 128 + signal, -1 if never started.
  int code() const;
  // "rank 2 exited with code 1", "rank 1 was killed by signal 11
  // (Segmentation fault)", ...
  std::string Describe() const;
};

// What a job came to. Value type.
struct JobResult {
  // OK when every rank ended ok(). Else, the first thing that went wrong:
  // kAborted naming the rank that failed first and how (the others it
  // stopped listed after it), kDeadlineExceeded naming the ranks still
  // running at the deadline, kInvalidArgument for bad options or a
  // malformed environment (a job token or run scope no rank could use),
  // kUnavailable when the store could not start, kInternal when a child
  // could not be started (naming the program and the error).
  absl::Status status;
  // By rank; empty when nothing was started.
  std::vector<RankExit> ranks;

  // RankExit::code() of every rank, by rank.
  std::vector<int> codes() const;
  // One exit code for the launching tool: that of the lowest rank that
  // failed without being stopped by the launcher (1 for a signal), so rank
  // 0's when it failed; else the lowest stopped rank's; else 1 if the job
  // failed otherwise; else 0.
  int exit_code() const;
};

// Starts and watches a job (see the file comment); returns once every
// child has ended and rank0, if any, has returned.
JobResult RunJob(const JobOptions& options);

// The multi-process tests' launch: `world_size` children of this binary
// with `env` added, stopped at `timeout` (bazel's medium tests get 300 s).
inline constexpr absl::Duration kTestJobTimeout = absl::Seconds(240);
JobResult LaunchRanks(int world_size, const std::map<std::string, std::string>& env,
                      absl::Duration timeout = kTestJobTimeout);

// The tools' launch (benchmarks, rdmaflow_train --local): this process is
// rank 0 and runs rank0(store); ranks 1..world_size-1 run this binary with
// `argv` plus `extra_flags`. No deadline. When a child fails, the job stops
// at once: the other children as above, and rank 0, if it is still running
// `grace` after they ended, with the process (stop_rank0_after). Prints the
// job's status to stderr when it failed and returns JobResult::exit_code().
int RunLocalJob(int world_size, char** argv,
                const std::vector<std::string>& extra_flags,
                const std::function<int(rdma::Store&)>& rank0,
                const Churn& churn = {});

}  // namespace rdmaflow::launch

#endif  // RDMAFLOW_LAUNCH_LAUNCHER_H_
