// File: tcp_store.h
// -----------------------------------------------------------------------------
// TcpStore: the production rendezvous Store, over LibTorch's c10d::TCPStore,
// the store torchrun uses. A job launched by torchrun, Slurm or mpirun finds
// it through MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. This is the only
// target of rdma/ that links LibTorch.
#ifndef RDMAFLOW_RDMA_TORCH_TCP_STORE_H_
#define RDMAFLOW_RDMA_TORCH_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/store.h"
#include "rdma/torch/c10d_store.h"

namespace rdmaflow::rdma::torch {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  // 0 (server only): pick a free port; read it back with TcpStore::port().
  int port = 29500;
  bool is_server = false;  // Rank 0 hosts the store.
  int world_size = 1;
  // How long to wait for the server (clients) or for all ranks (server).
  absl::Duration connect_timeout = absl::Seconds(60);

  int rank = 0;            // This process's rank (informational).

  // Prefix of every key (see run_scope.h); empty: none.
  std::string key_prefix;

  // From MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500), RANK
  // and WORLD_SIZE: rank 0 is the server, unless TORCHELASTIC_USE_AGENT_STORE
  // is True (torchrun's agent hosts it); keys scoped by RunScope (run id
  // and restart count). kInvalidArgument naming a variable that is missing
  // or malformed.
  static absl::StatusOr<TcpStoreOptions> FromEnvironment();
};

// Thread-safe (c10d::TCPStore is). A C10dStore over a TCPStore it creates.
class TcpStore final : public C10dStore {
 public:
  // kUnavailable naming host:port when the server cannot be started or
  // reached (is MASTER_ADDR right, is rank 0 up, is the port free?).
  static absl::StatusOr<std::unique_ptr<TcpStore>> Create(
      const TcpStoreOptions& options);

  // The port actually listened on (useful with port 0).
  int port() const;

 private:
  TcpStore(c10::intrusive_ptr<c10d::Store> store, int port, std::string where);

  int port_;
};

}  // namespace rdmaflow::rdma::torch

#endif  // RDMAFLOW_RDMA_TORCH_TCP_STORE_H_
