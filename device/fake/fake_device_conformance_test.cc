// The device conformance suite on the fake device, as it is and as a slow
// device (every operation delayed: only events can order the work).
#include <vector>

#include "device/fake/fake_device.h"
#include "device/testing/device_conformance.h"

namespace {

using ::rdmaflow::device::DeviceRuntime;
using ::rdmaflow::device::FakeDevice;
using ::rdmaflow::device::FakeDeviceOptions;
using ::rdmaflow::device::testing::DeviceBackend;

DeviceBackend Fake(const std::string& name, FakeDeviceOptions options) {
  return {name, [options]() -> absl::StatusOr<std::unique_ptr<DeviceRuntime>> {
            auto created = FakeDevice::Create(options);
            if (!created.ok()) return created.status();
            return std::unique_ptr<DeviceRuntime>(std::move(*created));
          }};
}

std::vector<DeviceBackend> FakeBackends() {
  FakeDeviceOptions slow;
  slow.operation_delay = absl::Milliseconds(2);
  return {Fake("fake", FakeDeviceOptions()), Fake("fake_slow", slow)};
}

}  // namespace

RDMAFLOW_INSTANTIATE_DEVICE_CONFORMANCE(Fake, FakeBackends)
