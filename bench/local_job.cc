// File: local_job.cc
#include "bench/local_job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rdma/builtin_transports.h"
#include "rdma/torch/run_scope.h"
#include "rdma/torch/tcp_store.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::bench {

namespace {

extern "C" char** environ;

// Forks and execs this binary as `rank` with `args`; the environment is
// built before the fork (the child only calls execve). -1 on failure.
pid_t SpawnRank(const std::vector<std::string>& args, int rank, int world_size, int port,
                bool rejoining) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string e = *entry;
    if (e.rfind("RANK=", 0) == 0 || e.rfind("WORLD_SIZE=", 0) == 0 ||
        e.rfind("MASTER_ADDR=", 0) == 0 || e.rfind("MASTER_PORT=", 0) == 0 ||
        e.rfind(absl::StrCat(kRejoinVariable, "="), 0) == 0) {
      continue;
    }
    env.push_back(e);
  }
  env.push_back(absl::StrCat("RANK=", rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", world_size));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(absl::StrCat("MASTER_PORT=", port));
  if (rejoining) env.push_back(absl::StrCat(kRejoinVariable, "=1"));
  std::vector<std::string> argv_copy = args;
  std::vector<char*> child_argv, child_env;
  for (std::string& arg : argv_copy) child_argv.push_back(arg.data());
  child_argv.push_back(nullptr);
  for (std::string& e : env) child_env.push_back(e.data());
  child_env.push_back(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return -1;
  }
  if (child == 0) {
    execve("/proc/self/exe", child_argv.data(), child_env.data());
    _exit(127);
  }
  return child;
}

bool KilledBySigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

}  // namespace

int RunLocalJob(int world_size, char** argv, const std::vector<std::string>& extra_flags,
                const std::function<int(rdma::Store&)>& rank0, const LocalJobChurn& churn) {
  // Every rank (this process and the children, which inherit it) proves
  // its handshakes and published addresses with one fresh secret.
  if (std::getenv("RDMAFLOW_JOB_TOKEN") == nullptr) {
    std::random_device urandom;
    std::string token;
    for (int i = 0; i < 4; ++i) token += absl::StrFormat("%08x", urandom());
    setenv("RDMAFLOW_JOB_TOKEN", token.c_str(), 1);
  }
  rdma::torch::TcpStoreOptions options;
  options.port = 0;
  options.is_server = true;
  options.world_size = world_size;
  // Rank 0 runs here: its keys are scoped as its children's are (they take
  // the scope from the same environment).
  absl::StatusOr<rdma::torch::RunScope> scope = rdma::torch::RunScope::FromEnvironment();
  if (!scope.ok()) {
    std::fprintf(stderr, "%s\n", scope.status().ToString().c_str());
    return 1;
  }
  options.key_prefix = scope->prefix();
  auto store = rdma::torch::TcpStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  const int port = (*store)->port();
  std::vector<std::string> args;
  for (char** arg = argv; *arg != nullptr; ++arg) args.push_back(*arg);
  for (const std::string& flag : extra_flags) args.push_back(flag);
  std::vector<pid_t> children;
  for (int rank = 1; rank < world_size; ++rank) {
    const pid_t child = SpawnRank(args, rank, world_size, port, false);
    if (child < 0) break;
    children.push_back(child);
  }
  // Churn with a restart: a watcher waits for the expendable rank and, if
  // it was SIGKILLed, starts it again (once), marked as rejoining.
  const bool watch = churn.restart && churn.expendable >= 1 &&
                     churn.expendable <= static_cast<int>(children.size());
  std::mutex mu;  // guards children[expendable - 1] and `stopping`
  bool stopping = false;
  std::atomic<int> watched_status{0};
  std::thread watcher;
  if (watch) {
    const size_t index = churn.expendable - 1;
    const pid_t first = children[index];
    watcher = std::thread([&, index, first] {
      int child_status = 0;
      waitpid(first, &child_status, 0);
      std::lock_guard<std::mutex> lock(mu);
      if (!KilledBySigkill(child_status) || stopping) {
        watched_status = WIFEXITED(child_status) ? WEXITSTATUS(child_status) : 0;
        children[index] = -1;  // reaped
        return;
      }
      std::fprintf(stderr, "local job: restarting rank %d (--restart_killed)\n",
                   churn.expendable);
      children[index] = SpawnRank(args, churn.expendable, world_size, port, true);
      if (children[index] < 0) watched_status = 1;
    });
  }
  int status = static_cast<int>(children.size()) == world_size - 1 ? rank0(**store) : 1;
  if (status != 0) {
    // The others would otherwise wait out their timeouts for a failed rank 0.
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    for (pid_t child : children) {
      if (child > 0) kill(child, SIGTERM);
    }
  }
  if (watch) watcher.join();
  if (status == 0 && watched_status != 0) status = watched_status;
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i] < 0) continue;
    int child_status = 0;
    waitpid(children[i], &child_status, 0);
    const bool restarted = watch && static_cast<int>(i) + 1 == churn.expendable;
    if (!restarted && KilledBySigkill(child_status) &&
        static_cast<int>(i) + 1 == churn.expendable) {
      continue;
    }
    const int code = WIFEXITED(child_status) ? WEXITSTATUS(child_status) : 1;
    if (status == 0 && code != 0) status = code;
  }
  return status;
}

int RunLaunchedRank(
    const std::function<int(int rank, int world_size, rdma::Store&)>& body) {
  absl::StatusOr<rdma::torch::TcpStoreOptions> options =
      rdma::torch::TcpStoreOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  auto store = rdma::torch::TcpStore::Create(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  return body(options->rank, options->world_size, **store);
}

absl::StatusOr<std::unique_ptr<rdma::Transport>> MakeTransport(
    const std::string& name, const std::string& params, int rank) {
  return rdma::CreateBuiltinTransport(name, params, rank);
}

}  // namespace rdmaflow::bench
