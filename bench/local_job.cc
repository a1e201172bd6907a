// File: local_job.cc
#include "bench/local_job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "rdma/builtin_transports.h"
#include "rdma/torch/tcp_store.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::bench {

int RunLocalJob(int world_size, char** argv,
                const std::vector<std::string>& extra_flags,
                const std::function<int(rdma::Store&)>& rank0, int expendable) {
  rdma::torch::TcpStoreOptions options;
  options.port = 0;
  options.is_server = true;
  options.world_size = world_size;
  auto store = rdma::torch::TcpStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> args;
  for (char** arg = argv; *arg != nullptr; ++arg) args.push_back(*arg);
  for (const std::string& flag : extra_flags) args.push_back(flag);
  std::vector<pid_t> children;
  for (int rank = 1; rank < world_size; ++rank) {
    const pid_t child = fork();
    if (child < 0) {
      std::perror("fork");
      break;
    }
    if (child == 0) {
      std::vector<char*> child_argv;
      for (std::string& arg : args) child_argv.push_back(arg.data());
      child_argv.push_back(nullptr);
      setenv("RANK", absl::StrCat(rank).c_str(), 1);
      setenv("WORLD_SIZE", absl::StrCat(world_size).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", absl::StrCat((*store)->port()).c_str(), 1);
      execv("/proc/self/exe", child_argv.data());
      _exit(127);
    }
    children.push_back(child);
  }
  int status = static_cast<int>(children.size()) == world_size - 1
                   ? rank0(**store)
                   : 1;
  // The others would otherwise wait out their timeouts for a failed rank 0.
  if (status != 0) {
    for (pid_t child : children) kill(child, SIGTERM);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    int child_status = 0;
    waitpid(children[i], &child_status, 0);
    const bool killed = WIFSIGNALED(child_status) && WTERMSIG(child_status) == SIGKILL;
    if (killed && static_cast<int>(i) + 1 == expendable) continue;
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
  rdma::TransportRegistry registry;
  if (absl::Status s = rdma::RegisterBuiltinTransports(registry); !s.ok()) {
    return s;
  }
  rdma::TransportConfig config;
  config.rank = rank;
  absl::StatusOr<std::map<std::string, std::string>> parsed =
      rdma::ParseTransportParams(params);
  if (!parsed.ok()) return parsed.status();
  config.params = *parsed;
  return registry.Create(name, config);
}

}  // namespace rdmaflow::bench
