// File: staged_conformance_test.cc
// The transport conformance suite (rdma/testing/transport_conformance.h) over
// device memory: each rank is a DeviceTransport over the in-process loopback
// backend and a fake device of its own, claiming a host of its own, so every
// write and read of the suite's data tests moves device regions through the
// staged path (rdma/device/staging.h; 4 slots of 256 KiB, reused many times
// by its 64 MiB transfers): byte-exact at unaligned offsets, notifications
// once, in post order and after their data, completions never inline,
// bounds and descriptors checked, back-pressure, Close, and a peer that
// dies.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/fake/fake_device.h"
#include "rdma/device/device_transport.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/transport_conformance.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::rdma::device_path {
namespace {

// A device transport that owns its fake device.
class OwningDeviceTransport final : public testing::TransportWrapper {
 public:
  OwningDeviceTransport(std::unique_ptr<device::FakeDevice> device,
                        std::unique_ptr<DeviceTransport> transport)
      : TransportWrapper(*transport),
        device_(std::move(device)),
        transport_(std::move(transport)) {}

  DeviceTransport& device_transport() { return *transport_; }

 private:
  // The transport goes first.
  std::unique_ptr<device::FakeDevice> device_;
  std::unique_ptr<DeviceTransport> transport_;
};

std::vector<testing::ConformanceBackend> StagedBackends() {
  testing::ConformanceBackend backend;
  backend.name = "device_staged_fake";
  backend.multi_process = false;
  backend.connect_both_ways = true;
  backend.allocate = [](Transport& transport, size_t bytes) -> absl::StatusOr<MemoryRegion> {
    auto* owning = dynamic_cast<OwningDeviceTransport*>(&transport);
    if (owning == nullptr) return absl::InternalError("not a device transport of this test");
    return owning->device_transport().AllocateDevice(bytes);
  };
  backend.new_group = [] {
    auto fabric = loopback::LoopbackFabric::Create();
    return [fabric](int rank) -> absl::StatusOr<std::unique_ptr<Transport>> {
      loopback::LoopbackTransportOptions host_options;
      host_options.rank = rank;
      host_options.fabric = fabric;
      host_options.max_outstanding_per_endpoint = 64;
      ASSIGN_OR_RETURN(std::unique_ptr<Transport> host,
                       loopback::LoopbackTransport::Create(host_options));
      ASSIGN_OR_RETURN(std::unique_ptr<device::FakeDevice> device,
                       device::FakeDevice::Create(device::FakeDeviceOptions{}));
      DeviceTransportOptions options;
      options.host_identity = absl::StrCat("conformance-host-", rank);
      options.staging.slots = 4;
      options.staging.slot_bytes = 256 << 10;
      options.staging.directory_ranks = 8;
      ASSIGN_OR_RETURN(std::unique_ptr<DeviceTransport> transport,
                       DeviceTransport::Create(std::move(host), device.get(), options));
      return std::unique_ptr<Transport>(
          new OwningDeviceTransport(std::move(device), std::move(transport)));
    };
  };
  return {backend};
}

}  // namespace
}  // namespace rdmaflow::rdma::device_path

RDMAFLOW_INSTANTIATE_CONFORMANCE(DeviceStaged, rdmaflow::rdma::device_path::StagedBackends)
