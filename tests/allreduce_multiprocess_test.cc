// End to end: the ring all-reduce between OS processes over UCX (shared
// memory with 4 ranks, TCP with 3), rendezvous through TCPStore: exact sums
// (integers in float32) from one element to 16 MiB + 12 bytes (uneven), one
// ring for all calls, every rank checking every element.
// The test binary re-executes itself per rank (launch/ranks_or_tests_main.h).
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/ring_allreduce.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "launch/ranks_or_tests_main.h"
#include "rdma/builtin_transports.h"

namespace rdmaflow {
namespace {

constexpr char kTlsEnv[] = "RDMAFLOW_RING_TEST_TLS";

float Value(int rank, size_t i) {
  return static_cast<float>((i * 5 + static_cast<size_t>(rank) * 11) % 2048);
}

absl::Status RunRank() {
  ASSIGN_OR_RETURN(launch::JoinedRank joined, launch::JoinJob());
  const int rank = joined.rank;
  const int world = joined.world_size;
  rdma::Store* store = joined.store.get();
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> ucx,
                   rdma::CreateBuiltinTransport(
                       "ucx", absl::StrCat("tls=", std::getenv(kTlsEnv)), rank));
  rdma::Transport* transport = ucx.get();
  collectives::RingAllReduceOptions ring_options;
  ring_options.capacity_bytes = (size_t{16} << 20) + 64;
  ring_options.timeout = absl::Seconds(60);
  std::vector<int> members(world);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(auto ring, collectives::RingAllReduce::Create(
                                  *transport, *store, "e2e", members, ring_options));
  float* data = reinterpret_cast<float*>(ring->data());
  for (size_t count : {size_t{1}, size_t{1023}, size_t{65537}, (size_t{4} << 20) + 3}) {
    for (size_t i = 0; i < count; ++i) data[i] = Value(rank, i);
    RETURN_IF_ERROR(ring->AllReduce(0, count, collectives::DataType::kFloat32));
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += Value(r, i);
      if (data[i] != expected) {
        return absl::DataLossError(absl::StrCat("rank ", rank, ", ", count,
                                                " elements: element ", i, " is ",
                                                data[i], ", expected ", expected));
      }
    }
  }
  return ring->Shutdown();
}

TEST(AllReduceMultiProcessTest, FourProcessesOverSharedMemory) {
  EXPECT_OK(launch::LaunchRanks(4, {{kTlsEnv, "shm"}}).status);
}

TEST(AllReduceMultiProcessTest, ThreeProcessesOverTcp) {
  EXPECT_OK(launch::LaunchRanks(3, {{kTlsEnv, "tcp"}}).status);
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(
      argc, argv, rdmaflow::kTlsEnv, [](const char*) { return rdmaflow::RunRank(); });
}
