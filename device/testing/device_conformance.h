// File: device_conformance.h
// -----------------------------------------------------------------------------
// One conformance suite for every DeviceRuntime (TEST_P over a
// DeviceBackend): memory and pointer queries, copies in every direction at
// odd sizes and offsets, stream order, events across streams, reductions
// against a float64 reference, argument checks, and IPC between two
// processes (the test starts its own binary again as the peer, since a
// handle does not open in the process that exported it). A runtime that
// cannot start here (kUnavailable: no driver, no device) skips with its
// reason.
//
// A runtime's test file defines its backends and instantiates the suite,
// which also defines main():
//
//   std::vector<DeviceBackend> FakeBackends() { ... }
//   RDMAFLOW_INSTANTIATE_DEVICE_CONFORMANCE(Fake, FakeBackends)
#ifndef RDMAFLOW_DEVICE_TESTING_DEVICE_CONFORMANCE_H_
#define RDMAFLOW_DEVICE_TESTING_DEVICE_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device_runtime.h"
#include "gtest/gtest.h"

namespace rdmaflow::device::testing {

struct DeviceBackend {
  std::string name;  // test-name suffix, e.g. "fake"
  // A runtime of device 0; every call in one process may return a new one.
  std::function<absl::StatusOr<std::unique_ptr<DeviceRuntime>>()> create;
};

class DeviceConformanceTest : public ::testing::TestWithParam<DeviceBackend> {};

std::string DeviceBackendName(const ::testing::TestParamInfo<DeviceBackend>& info);

// main() of a conformance test binary: runs the tests, or, when started by
// the IPC test as its peer process, serves as that peer.
int RunDeviceConformanceMain(int argc, char** argv, const std::vector<DeviceBackend>& backends);

}  // namespace rdmaflow::device::testing

// Instantiates the suite for `backends_fn()` (a function returning
// std::vector<DeviceBackend>) and defines main(). Use at file scope.
#define RDMAFLOW_INSTANTIATE_DEVICE_CONFORMANCE(prefix, backends_fn)                    \
  namespace rdmaflow::device::testing {                                                 \
  INSTANTIATE_TEST_SUITE_P(prefix, DeviceConformanceTest, ::testing::ValuesIn(backends_fn()), \
                           DeviceBackendName);                                          \
  }                                                                                     \
  int main(int argc, char** argv) {                                                     \
    return ::rdmaflow::device::testing::RunDeviceConformanceMain(argc, argv, backends_fn()); \
  }

#endif  // RDMAFLOW_DEVICE_TESTING_DEVICE_CONFORMANCE_H_
