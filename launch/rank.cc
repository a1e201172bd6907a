// File: rank.cc
#include "launch/rank.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launch/launcher.h"
#include "rdma/torch/tcp_store.h"

namespace rdmaflow::launch {
namespace {

absl::StatusOr<JoinedRank> Join(const rdma::torch::TcpStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<rdma::torch::TcpStore>> store =
      rdma::torch::TcpStore::Create(options);
  if (!store.ok()) return store.status();
  JoinedRank joined;
  joined.rank = options.rank;
  joined.world_size = options.world_size;
  joined.store = std::move(*store);
  return joined;
}

}  // namespace

absl::StatusOr<JoinedRank> JoinJob() {
  absl::StatusOr<rdma::torch::TcpStoreOptions> options =
      rdma::torch::TcpStoreOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  return Join(*options);
}

bool IsRejoining() {
  const char* value = std::getenv(kRejoinVariable);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

int RunLaunchedRank(
    const std::function<int(int rank, int world_size, rdma::Store& store)>& body) {
  absl::StatusOr<rdma::torch::TcpStoreOptions> options =
      rdma::torch::TcpStoreOptions::FromEnvironment();
  if (!options.ok()) {  // the environment is wrong
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<JoinedRank> joined = Join(*options);
  if (!joined.ok()) {  // the store is out of reach
    std::fprintf(stderr, "%s\n", joined.status().ToString().c_str());
    return 1;
  }
  return body(joined->rank, joined->world_size, *joined->store);
}

}  // namespace rdmaflow::launch
