// two_rank_write: rank 0 writes 1 MiB into a region of rank 1 with one
// one-sided write and a notification; rank 1 checks every byte, then reads
// rank 0's buffer back with one one-sided read and checks it again. Run two
// ranks under torchrun (it sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE):
//
//   torchrun --standalone --redirects 1 --tee 1 --nproc_per_node=2 --no_python bazel-bin/two_rank_write [TRANSPORT [PARAMS]]
// (--redirects 1 --tee 1: Debian's torch 1.13 needs them; docs/torch.md.)
//
// TRANSPORT is a backend name ("ucx", default, or "ibverbs"); PARAMS its
// "key=value,..." parameters ("tls=shm" by default: UCX shared memory).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"
#include "rdma/torch/tcp_store.h"

namespace rdma = rdmaflow::rdma;

namespace {

constexpr size_t kBytes = 1 << 20;
constexpr uint32_t kWritten = 1;  // rank 0's notification: "the data is there"

std::byte Pattern(size_t i) { return static_cast<std::byte>((i * 31 + 7) % 251); }

// The first byte of `region` that differs from the pattern, as an error.
absl::Status CheckPattern(const rdma::MemoryRegion& region, const char* what) {
  for (size_t i = 0; i < kBytes; ++i) {
    if (region.data()[i] != Pattern(i)) {
      return absl::DataLossError(absl::StrCat(
          what, ": byte ", i, " is ", std::to_integer<int>(region.data()[i]),
          ", expected ", std::to_integer<int>(Pattern(i))));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const std::string& transport_name, const std::string& params) {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions store_options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  if (store_options.world_size != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "two_rank_write needs exactly 2 ranks, WORLD_SIZE is ", store_options.world_size));
  }
  ASSIGN_OR_RETURN(auto store, rdma::torch::TcpStore::Create(store_options));
  const int rank = store_options.rank;
  const int peer = 1 - rank;
  const absl::Duration timeout = absl::Seconds(60);

  ASSIGN_OR_RETURN(auto transport, rdma::CreateBuiltinTransport(transport_name, params, rank));
  ASSIGN_OR_RETURN(rdma::MemoryRegion buffer, transport->Allocate(kBytes));
  RETURN_IF_ERROR(rdma::PublishAddress(*store, "consumer", *transport));
  RETURN_IF_ERROR(rdma::PublishRegion(*store, "consumer", absl::StrCat("buf/", rank),
                                      buffer.descriptor()));
  ASSIGN_OR_RETURN(auto endpoint,
                   rdma::ConnectToPeer(*transport, *store, "consumer", peer, timeout));
  ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                   rdma::FetchRegion(*store, "consumer", absl::StrCat("buf/", peer), timeout));
  const absl::Time deadline = absl::Now() + timeout;
  if (rank == 0) {
    for (size_t i = 0; i < kBytes; ++i) buffer.data()[i] = Pattern(i);
    RETURN_IF_ERROR(rdma::Write(*transport, *endpoint, rdma::WholeRegion(buffer),
                                rdma::WholeRegion(remote), kWritten, deadline));
  } else {
    ASSIGN_OR_RETURN(rdma::Notification note, rdma::WaitNotification(*transport, deadline));
    if (note.value != kWritten || note.peer_rank != 0) {
      return absl::DataLossError(absl::StrCat("notification ", note.value, " from rank ",
                                              note.peer_rank, ", expected ", kWritten,
                                              " from rank 0"));
    }
    RETURN_IF_ERROR(CheckPattern(buffer, "the written region"));
    // Read rank 0's copy back over ours (zeroed first), and check it again.
    for (size_t i = 0; i < kBytes; ++i) buffer.data()[i] = std::byte{0};
    RETURN_IF_ERROR(rdma::Read(*transport, *endpoint, rdma::WholeRegion(buffer),
                               rdma::WholeRegion(remote), deadline));
    RETURN_IF_ERROR(CheckPattern(buffer, "the region read back"));
    std::printf("two_rank_write: rank 1 received %zu bytes by write and %zu by read over %s, "
                "every byte checked\n",
                kBytes, kBytes, transport_name.c_str());
  }
  // Rank 0 keeps its region registered until rank 1 has read it, and
  // progresses its transport meanwhile: where a backend emulates reads in
  // software (UCX over TCP), rank 1's read needs rank 0's progress.
  return rdma::Barrier(*store, "consumer", "done", 2, timeout, [&](absl::Time until) {
    return rdma::ProgressUntil(*transport, [&] { return absl::Now() >= until; }, until + timeout,
                               "the barrier");
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3 || (argc > 1 && (std::string(argv[1]) == "--help" ||
                                std::string(argv[1]) == "-h"))) {
    std::fprintf(stderr, "usage: %s [TRANSPORT [PARAMS]]   (run 2 ranks under torchrun)\n",
                 argv[0]);
    return argc > 3 ? 2 : 0;
  }
  const std::string transport = argc > 1 ? argv[1] : "ucx";
  const std::string params = argc > 2 ? argv[2] : "tls=shm";
  const absl::Status status = Run(transport, params);
  if (!status.ok()) {
    std::fprintf(stderr, "two_rank_write: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
