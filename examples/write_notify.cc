// The README's example: rank 1 exposes a region, rank 0 writes into it with
// one one-sided write and notifies. Launch two ranks, e.g.
//   tools/torchrun.sh --nproc_per_node=2 --no_python bazel-bin/examples/write_notify
// (or any torchrun), or set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE=2
// by hand.
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"
#include "rdma/torch/tcp_store.h"

namespace rdma = rdmaflow::rdma;

absl::Status Run() {
  // MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE: set by torchrun/mpirun/Slurm.
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions store_options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  ASSIGN_OR_RETURN(auto store, rdma::torch::TcpStore::Create(store_options));
  const int rank = store_options.rank;

  // A backend by name, through the registry ("ibverbs" for native verbs).
  ASSIGN_OR_RETURN(auto transport, rdma::CreateBuiltinTransport("ucx", "tls=shm", rank));
  ASSIGN_OR_RETURN(rdma::MemoryRegion buffer, transport->Allocate(1 << 20));
  RETURN_IF_ERROR(rdma::PublishAddress(*store, "job", *transport));
  RETURN_IF_ERROR(rdma::PublishRegion(*store, "job", absl::StrCat("buf/", rank),
                                      buffer.descriptor()));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  if (rank == 0) {
    ASSIGN_OR_RETURN(auto endpoint, rdma::ConnectToPeer(*transport, *store,
                                                        "job", 1,
                                                        absl::Seconds(30)));
    ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                     rdma::FetchRegion(*store, "job", "buf/1",
                                       absl::Seconds(30)));
    std::memset(buffer.data(), 42, buffer.size());
    // One one-sided write of the whole buffer, then notification 7 at rank 1.
    RETURN_IF_ERROR(rdma::Write(*transport, *endpoint,
                                rdma::WholeRegion(buffer),
                                rdma::WholeRegion(remote), 7u, deadline));
  } else {
    ASSIGN_OR_RETURN(rdma::Notification note,
                     rdma::WaitNotification(*transport, deadline));
    std::printf("rank %d: notification %u from rank %d, first byte %d\n",
                rank, note.value, note.peer_rank,
                static_cast<int>(buffer.data()[0]));
  }
  return rdma::Barrier(*store, "job", "done", store_options.world_size,
                       absl::Seconds(30));
}

constexpr char kUsage[] =
    "usage: write_notify (two ranks, e.g. tools/torchrun.sh --nproc_per_node=2\n"
    "       --no_python bazel-bin/examples/write_notify)\n"
    "Rank 1 exposes a 1 MiB region; rank 0 writes into it with one one-sided\n"
    "write and notifies. Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE.\n";

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fputs(kUsage, help ? stdout : stderr);
    return help ? 0 : 2;  // Takes no arguments: a usage error.
  }
  absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
