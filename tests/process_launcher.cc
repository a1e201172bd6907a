// File: process_launcher.cc
#include "tests/process_launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/torch/tcp_store.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::testing {

std::vector<int> LaunchRanks(int world,
                             const std::map<std::string, std::string>& env) {
  rdma::torch::TcpStoreOptions options;
  options.port = 0;
  options.is_server = true;
  options.world_size = world;
  auto store = rdma::torch::TcpStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return {};
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", absl::StrCat(rank).c_str(), 1);
      setenv("WORLD_SIZE", absl::StrCat(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", absl::StrCat((*store)->port()).c_str(), 1);
      setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
      for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
      execl("/proc/self/exe", "multiprocess_rank", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status)     ? WEXITSTATUS(status)
                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                          : 128);
  }
  return codes;
}

absl::StatusOr<UcxRank> JoinAsUcxRank(const std::string& tls) {
  absl::StatusOr<rdma::torch::TcpStoreOptions> options =
      rdma::torch::TcpStoreOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  UcxRank joined;
  joined.rank = options->rank;
  joined.world_size = options->world_size;
  absl::StatusOr<std::unique_ptr<rdma::torch::TcpStore>> store =
      rdma::torch::TcpStore::Create(*options);
  if (!store.ok()) return store.status();
  joined.store = std::move(*store);
  rdma::ucx::UcxTransportOptions transport;
  transport.rank = joined.rank;
  transport.tls = tls;
  absl::StatusOr<std::unique_ptr<rdma::ucx::UcxTransport>> created =
      rdma::ucx::UcxTransport::Create(transport);
  if (!created.ok()) return created.status();
  joined.transport = std::move(*created);
  return joined;
}

int RanksOrTestsMain(int argc, char** argv, const char* env,
                     const std::function<absl::Status(const char* value)>& rank) {
  const char* value = std::getenv(env);
  if (value != nullptr && std::getenv("RANK") != nullptr) {
    absl::Status status = rank(value);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"),
                   status.ToString().c_str());
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace rdmaflow::testing
