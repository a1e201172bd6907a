// File: testing/fake_device_rank.h
// -----------------------------------------------------------------------------
// A test rank's transport with device regions: its host transport wrapped
// in a DeviceTransport over a fake device of its own (device/fake), for
// the tests of whatever keeps tensors in device memory (versioned buffers,
// the strategies' device parameters) without a GPU.
//
//   ASSIGN_OR_RETURN(FakeDeviceRank rank_device,
//                    WrapInFakeDevice(std::move(host), absl::StrCat("host-", rank)));
//   StrategyContext context{rank, world, rank_device.transport.get(), &store};
//   context.device = rank_device.transport.get();
#ifndef RDMAFLOW_RDMA_DEVICE_TESTING_FAKE_DEVICE_RANK_H_
#define RDMAFLOW_RDMA_DEVICE_TESTING_FAKE_DEVICE_RANK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "device/fake/fake_device.h"
#include "rdma/device/device_transport.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::device_path::testing {

// Move-only. The transport goes before the device it uses (declared after).
struct FakeDeviceRank {
  std::unique_ptr<device::FakeDevice> device;
  std::unique_ptr<DeviceTransport> transport;
};

// Wraps `host` (taken) in a DeviceTransport over a new fake device that
// says it is on host `host_identity`. Ranks of one process on one host
// identity reach each other's device memory by IPC, which the fake device
// (as CUDA) opens only in another process: in-process ranks take a host
// identity each, so their device regions go the staged way (each then
// answers the others' reads and writes in its own progress). The fake
// device's and the device transport's errors.
absl::StatusOr<FakeDeviceRank> WrapInFakeDevice(std::unique_ptr<Transport> host,
                                                const std::string& host_identity,
                                                const device::FakeDeviceOptions& options = {});

}  // namespace rdmaflow::rdma::device_path::testing

#endif  // RDMAFLOW_RDMA_DEVICE_TESTING_FAKE_DEVICE_RANK_H_
