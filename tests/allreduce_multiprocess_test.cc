// End to end: the all-reduce (collectives/allreduce_group.h) between OS
// processes over UCX, rendezvous through TCPStore: over shared memory with 4
// ranks the members map each other's memory and take the host algorithms
// (one-shot and scatter-gather), or the ring with direct access off; over
// TCP with 3 ranks nothing maps and the ring runs; on 2 network-namespace
// hosts of 2 ranks each (tools/netns_hosts.sh: shared memory within a host,
// TCP between them; needs root) the group runs hierarchically. Exact sums (integers in
// float32) from one element to 16 MiB + 12 bytes (uneven), one group for all
// calls, every rank checking every element and the algorithm taken.
// The test binary re-executes itself per rank (launch/ranks_or_tests_main.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/allreduce_group.h"
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

// "shm" or "tcp": UCX's transports; "netns": UCX's choice, TCP on eth0
// (each rank on a namespace host).
constexpr char kTlsEnv[] = "RDMAFLOW_RING_TEST_TLS";
constexpr char kDirectEnv[] = "RDMAFLOW_RING_TEST_DIRECT";
// Set: the last rank dies right after Create(), and the others' first call
// must fail naming it (reading its shared memory must not fault).
constexpr char kDieEnv[] = "RDMAFLOW_RING_TEST_LAST_RANK_DIES";

float Value(int rank, size_t i) {
  return static_cast<float>((i * 5 + static_cast<size_t>(rank) * 11) % 2048);
}

absl::Status RunRank() {
  ASSIGN_OR_RETURN(launch::JoinedRank joined, launch::JoinJob());
  const int rank = joined.rank;
  const int world = joined.world_size;
  rdma::Store* store = joined.store.get();
  const std::string tls = std::getenv(kTlsEnv);
  const bool netns = tls == "netns";
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> ucx,
                   rdma::CreateBuiltinTransport(
                       "ucx", netns ? "net_devices=eth0" : absl::StrCat("tls=", tls), rank));
  rdma::Transport* transport = ucx.get();
  collectives::AllReduceGroupOptions options;
  options.ring.capacity_bytes = (size_t{16} << 20) + 64;
  options.ring.timeout = absl::Seconds(60);
  const bool shm = tls == "shm";
  ASSIGN_OR_RETURN(options.direct, collectives::ParseDirectAccess(std::getenv(kDirectEnv)));
  const bool direct = shm && options.direct == collectives::DirectAccess::kAuto;
  std::vector<int> members(world);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(auto ring, collectives::AllReduceGroup::Create(
                                  *transport, *store, "e2e", members, options));
  if (ring->direct() != direct || ring->hierarchical() != netns ||
      ring->hosts() != (netns ? 2 : 1)) {
    return absl::InternalError(absl::StrCat(
        "rank ", rank, ": direct access is ", ring->direct(), ", expected ", direct,
        "; hierarchical ", ring->hierarchical(), " on ", ring->hosts(),
        " hosts, expected ", netns ? "true on 2" : "false on 1"));
  }
  if (std::getenv(kDieEnv) != nullptr) {
    if (rank == world - 1) std::_Exit(0);  // no shutdown, no goodbye: a crash
    absl::Status status = ring->AllReduce(0, 65537, collectives::DataType::kFloat32);
    const std::string dead = absl::StrCat("rank ", world - 1);
    // Its own verdict, or a peer's that gave up first (kAborted naming it).
    const bool named = absl::StrContains(status.message(), dead) ||
                       (absl::IsAborted(status) && absl::StrContains(status.message(), "gave up"));
    if (status.ok() || !named) {
      return absl::InternalError(absl::StrCat("rank ", rank, ": a call with ", dead,
                                              " dead gave ", status.ToString()));
    }
    std::fprintf(stderr, "rank %d: with %s dead: %s\n", rank, dead.c_str(),
                 status.ToString().c_str());
    return absl::OkStatus();  // its memory stays registered (no barrier)
  }
  float* data = reinterpret_cast<float*>(ring->data());
  for (size_t count : {size_t{1}, size_t{1023}, size_t{65537}, (size_t{4} << 20) + 3}) {
    for (size_t i = 0; i < count; ++i) data[i] = Value(rank, i);
    RETURN_IF_ERROR(ring->AllReduce(0, count, collectives::DataType::kFloat32));
    const collectives::AllReduceAlgorithm expected =
        netns     ? collectives::AllReduceAlgorithm::kHierarchical
        : !direct ? collectives::AllReduceAlgorithm::kRing
        : count * 4 <= options.one_shot_max_bytes
            ? collectives::AllReduceAlgorithm::kHostOneShot
            : collectives::AllReduceAlgorithm::kHostScatterGather;
    if (ring->last_algorithm() != expected) {
      return absl::InternalError(absl::StrCat(
          "rank ", rank, ", ", count, " elements: took ",
          collectives::AlgorithmName(ring->last_algorithm()), ", expected ",
          collectives::AlgorithmName(expected)));
    }
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

TEST(AllReduceMultiProcessTest, FourProcessesOverSharedMemoryReadEachOthersMemory) {
  EXPECT_OK(launch::LaunchRanks(4, {{kTlsEnv, "shm"}, {kDirectEnv, "auto"}}).status);
}

TEST(AllReduceMultiProcessTest, FourProcessesOverSharedMemoryRingOnly) {
  EXPECT_OK(launch::LaunchRanks(4, {{kTlsEnv, "shm"}, {kDirectEnv, "off"}}).status);
}

TEST(AllReduceMultiProcessTest, ARankThatDiesFailsItsPeersCallsWithoutAFault) {
  // Over shared memory the peers read the dead rank's memory through their
  // mappings: UCX releases its endpoint, but the mappings stay until their
  // owner closes them, so the peers see stale words and then the failed
  // liveness probe, not a segmentation fault.
  EXPECT_OK(
      launch::LaunchRanks(3, {{kTlsEnv, "shm"}, {kDirectEnv, "auto"}, {kDieEnv, "1"}}).status);
}

TEST(AllReduceMultiProcessTest, ThreeProcessesOverTcpFallBackToTheRing) {
  EXPECT_OK(launch::LaunchRanks(3, {{kTlsEnv, "tcp"}, {kDirectEnv, "auto"}}).status);
}

// Two hosts (network and PID namespaces) of two ranks each, made with
// tools/netns_hosts.sh under a prefix and subnet of this test's own; every
// rank is started on its host by the script's `exec`, and reaches the store
// this process hosts through the hosts' bridge.
TEST(AllReduceMultiProcessTest, TwoNamespaceHostsOfTwoRanksRunHierarchically) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make network and PID namespaces";
  const std::string script = "tools/netns_hosts.sh";
  if (access(script.c_str(), X_OK) != 0) GTEST_SKIP() << script << " is not in the runfiles";
  // Names and a subnet of this run's own (interface names are at most 15
  // characters: "rfa" + pid + "br").
  const int pid = static_cast<int>(getpid());
  const std::string prefix = absl::StrCat("rfa", pid);
  const std::string subnet = absl::StrCat("10.", 64 + (pid / 256) % 64, ".", pid % 256);
  const std::string env = absl::StrCat("NETNS_PREFIX=", prefix, " NETNS_SUBNET=", subnet, " ");
  // Whether this machine lets us make namespaces at all; a failure after
  // that is the script's, and fails the test.
  const std::string probe = absl::StrCat(prefix, "probe");
  if (std::system(absl::StrCat("ip netns add ", probe, " >/dev/null 2>&1 && ip netns del ",
                               probe, " && unshare --pid --fork true").c_str()) != 0) {
    GTEST_SKIP() << "this machine does not let root make network and PID namespaces "
                    "(ip netns add, unshare --pid)";
  }
  struct Down {
    std::string command;
    ~Down() { std::system(command.c_str()); }
  } down{absl::StrCat(env, script, " down 2 >/dev/null 2>&1")};
  std::string output;
  FILE* pipe = popen(absl::StrCat(env, script, " up 2 none 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) output += line;
  ASSERT_EQ(pclose(pipe), 0) << script << " up failed: " << output;
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  launch::JobOptions job;
  job.world_size = 4;
  job.program = "/bin/sh";
  // Ranks 0 and 1 on host 0, 2 and 3 on host 1.
  job.argv = {"sh", "-c", "exec \"$0\" exec $((RANK / 2)) \"$1\"", script, self};
  job.env = {{kTlsEnv, "netns"},
             {kDirectEnv, "auto"},
             {"NETNS_PREFIX", prefix},
             {"MASTER_ADDR", absl::StrCat(subnet, ".254")}};
  job.timeout = launch::kTestJobTimeout;
  // `down` (at the end of the scope) also ends whatever a failed rank left
  // in the hosts' PID namespaces.
  EXPECT_OK(launch::RunJob(job).status);
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(
      argc, argv, rdmaflow::kTlsEnv, [](const char*) { return rdmaflow::RunRank(); });
}
