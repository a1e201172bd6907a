// File: device_tensors.cc
#include "strategies/device_tensors.h"

#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "device/fake/fake_device.h"
#include "rdma/device/device_transport.h"

namespace rdmaflow::strategies {

c10::Device TensorDeviceOf(rdma::device_path::DeviceTransport* device) {
  if (device == nullptr ||
      dynamic_cast<const device::FakeDevice*>(&device->runtime()) != nullptr) {
    return c10::Device(c10::DeviceType::CPU);
  }
  return c10::Device(c10::DeviceType::CUDA,
                     static_cast<c10::DeviceIndex>(device->runtime().device()));
}

void SynchronizeTorchDevice(const c10::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

}  // namespace rdmaflow::strategies
