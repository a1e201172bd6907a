// File: testing/fake_device_rank.cc
#include "rdma/device/testing/fake_device_rank.h"

#include <utility>

#include "common/status_macros.h"

namespace rdmaflow::rdma::device_path::testing {

absl::StatusOr<FakeDeviceRank> WrapInFakeDevice(std::unique_ptr<Transport> host,
                                                const std::string& host_identity,
                                                const device::FakeDeviceOptions& options) {
  FakeDeviceRank rank;
  ASSIGN_OR_RETURN(rank.device, device::FakeDevice::Create(options));
  DeviceTransportOptions transport_options;
  transport_options.host_identity = host_identity;
  ASSIGN_OR_RETURN(rank.transport,
                   DeviceTransport::Create(std::move(host), rank.device.get(), transport_options));
  return rank;
}

}  // namespace rdmaflow::rdma::device_path::testing
