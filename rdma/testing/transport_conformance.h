// File: transport_conformance.h
// -----------------------------------------------------------------------------
// One conformance suite for every backend (TEST_P over a ConformanceBackend):
// byte-exact writes and reads from 1 B to 64 MiB at unaligned offsets,
// notifications exactly once and in post order, completions exactly once and
// never inline, bounds and descriptor checks, back-pressure, Close, and a
// peer that dies. A backend that cannot start here (kUnavailable) skips with
// its reason.
//
// A backend's test file defines its backends and instantiates the suite,
// which also defines main():
//
//   std::vector<ConformanceBackend> UcxBackends() { ... }
//   RDMAFLOW_INSTANTIATE_CONFORMANCE(Ucx, UcxBackends)
#ifndef RDMAFLOW_RDMA_TESTING_TRANSPORT_CONFORMANCE_H_
#define RDMAFLOW_RDMA_TESTING_TRANSPORT_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "rdma/memory_region.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

// Creates the transport of `rank`; all transports from one factory can reach
// each other.
using RankFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(int rank)>;

struct ConformanceBackend {
  std::string name;  // Test-name suffix, e.g. "ucx_shm".
  // A fresh group per test (e.g. a new loopback fabric).
  std::function<RankFactory()> new_group;
  // True: ranks may live in separate processes, and the dead-peer test kills
  // a child process. False (in-process backends): a peer dies when its
  // transport is destroyed.
  bool multi_process = false;
  // The memory the data tests move: a transport's Allocate() unless set
  // (e.g. device regions of a device transport).
  std::function<absl::StatusOr<MemoryRegion>(Transport&, size_t)> allocate;
  // True: rank 1 connects back to rank 0 as well (a backend whose
  // transfers need both directions, as the device transport's staged path).
  bool connect_both_ways = false;
  // True: Close() ends operations in flight only as the peer progresses
  // (UCX over TCP: a graceful close, whose flush needs the target's
  // progress, as its puts and gets do).
  bool close_needs_peer_progress = false;
};

class TransportConformanceTest
    : public ::testing::TestWithParam<ConformanceBackend> {};

std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackend>& info);

// main() of a conformance test binary: runs the tests, or, when started by
// the dead-peer test as its child process, serves as the peer.
int RunConformanceMain(int argc, char** argv,
                       const std::vector<ConformanceBackend>& backends);

}  // namespace rdmaflow::rdma::testing

// Instantiates the suite for `backends_fn()` (a function returning
// std::vector<ConformanceBackend>) and defines main(). Use at file scope.
#define RDMAFLOW_INSTANTIATE_CONFORMANCE(prefix, backends_fn)               \
  namespace rdmaflow::rdma::testing {                                       \
  INSTANTIATE_TEST_SUITE_P(prefix, TransportConformanceTest,                \
                           ::testing::ValuesIn(backends_fn()),              \
                           ConformanceBackendName);                         \
  }                                                                         \
  int main(int argc, char** argv) {                                         \
    return ::rdmaflow::rdma::testing::RunConformanceMain(argc, argv,        \
                                                         backends_fn());    \
  }

#endif  // RDMAFLOW_RDMA_TESTING_TRANSPORT_CONFORMANCE_H_
