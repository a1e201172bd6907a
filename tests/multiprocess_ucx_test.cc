// Real multi-process test: N OS processes rendezvous through LibTorch's
// TCPStore (as under torchrun) and exchange data all-to-all with one-sided
// UCX writes and reads, over shared memory and over TCP.
//
// The test process is the launcher; it re-executes itself once per rank with
// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun would.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "launch/ranks_or_tests_main.h"
#include "rdma/blocking.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"

namespace rdmaflow {
namespace {

constexpr char kTlsEnv[] = "RDMAFLOW_E2E_TLS";
constexpr size_t kSlot = 1 << 20;  // Bytes each rank writes to each peer.
constexpr absl::Duration kTimeout = absl::Seconds(60);

uint8_t Stamp(int writer, int reader, size_t i) {
  return static_cast<uint8_t>(writer * 31 + reader * 7 + i * 13);
}

// One rank: write a stamped slot into every peer, wait for every peer's
// notification, check the bytes, then read every peer's slot back.
absl::Status RunRank() {
  ASSIGN_OR_RETURN(launch::JoinedRank joined, launch::JoinJob());
  const int rank = joined.rank;
  const int world = joined.world_size;
  rdma::Store* store = joined.store.get();
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> ucx,
                   rdma::CreateBuiltinTransport(
                       "ucx", absl::StrCat("tls=", std::getenv(kTlsEnv)), rank));
  rdma::Transport* transport = ucx.get();

  // Slot w of `inbox` receives rank w's data.
  ASSIGN_OR_RETURN(rdma::MemoryRegion inbox, transport->Allocate(kSlot * world));
  ASSIGN_OR_RETURN(rdma::MemoryRegion outbox, transport->Allocate(kSlot * world));
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < kSlot; ++i) {
      outbox.data()[peer * kSlot + i] = std::byte{Stamp(rank, peer, i)};
    }
  }
  RETURN_IF_ERROR(rdma::PublishAddress(*store, "e2e", *transport));
  RETURN_IF_ERROR(rdma::PublishRegion(*store, "e2e",
                                      absl::StrCat("inbox/", rank),
                                      inbox.descriptor()));
  std::vector<std::unique_ptr<rdma::Endpoint>> endpoints(world);
  std::vector<rdma::RemoteRegion> inboxes(world);
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(endpoints[peer], rdma::ConnectToPeer(*transport, *store,
                                                          "e2e", peer, kTimeout));
    ASSIGN_OR_RETURN(inboxes[peer], rdma::FetchRegion(*store, "e2e",
                                                      absl::StrCat("inbox/", peer),
                                                      kTimeout));
  }
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    RETURN_IF_ERROR(rdma::Write(
        *transport, *endpoints[peer], {&outbox, peer * kSlot, kSlot},
        {&inboxes[peer], rank * kSlot, kSlot}, static_cast<uint32_t>(rank),
        deadline));
  }
  std::vector<bool> heard(world, false);
  for (int n = 0; n < world - 1; ++n) {
    ASSIGN_OR_RETURN(rdma::Notification note,
                     rdma::WaitNotification(*transport, deadline));
    if (note.peer_rank != static_cast<int>(note.value) || heard[note.value]) {
      return absl::InternalError(absl::StrCat(
          "rank ", rank, " got an unexpected notification from rank ",
          note.peer_rank, " with value ", note.value));
    }
    heard[note.value] = true;
    for (size_t i = 0; i < kSlot; ++i) {
      if (inbox.data()[note.value * kSlot + i] !=
          std::byte{Stamp(note.value, rank, i)}) {
        return absl::DataLossError(absl::StrCat(
            "rank ", rank, ": byte ", i, " from rank ", note.value,
            " is wrong"));
      }
    }
  }
  // Everyone has its data: now read each peer's inbox slot addressed to us
  // back (one-sided, the peer only progresses) and compare.
  ASSIGN_OR_RETURN(rdma::MemoryRegion readback, transport->Allocate(kSlot));
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    RETURN_IF_ERROR(rdma::Read(*transport, *endpoints[peer],
                               {&readback, 0, kSlot},
                               {&inboxes[peer], rank * kSlot, kSlot}, deadline));
    if (std::memcmp(readback.data(), outbox.data() + peer * kSlot, kSlot) != 0) {
      return absl::DataLossError(absl::StrCat(
          "rank ", rank, ": read back from rank ", peer, " differs"));
    }
  }
  // Keep serving reads until every rank is done.
  RETURN_IF_ERROR(store->Add("e2e/done", 1).status());
  while (true) {
    ASSIGN_OR_RETURN(int64_t done, store->Add("e2e/done", 0));
    if (done == world) break;
    for (int i = 0; i < 1000; ++i) RETURN_IF_ERROR(transport->Progress().status());
  }
  return absl::OkStatus();
}

absl::Status Launch(int world, const std::string& tls) {
  return launch::LaunchRanks(world, {{kTlsEnv, tls}}).status;
}

TEST(MultiProcessUcxTest, ThreeProcessesOverSharedMemory) {
  EXPECT_OK(Launch(3, "shm"));
}

TEST(MultiProcessUcxTest, ThreeProcessesOverTcp) {
  EXPECT_OK(Launch(3, "tcp"));
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(
      argc, argv, rdmaflow::kTlsEnv, [](const char*) { return rdmaflow::RunRank(); });
}
