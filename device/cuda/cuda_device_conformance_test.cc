// The device conformance suite on CUDA device 0 (skipped, with CUDA's
// reason, where no driver or device answers).
#include <vector>

#include "device/cuda/cuda_device.h"
#include "device/testing/device_conformance.h"

namespace {

using ::rdmaflow::device::CudaDevice;
using ::rdmaflow::device::DeviceRuntime;
using ::rdmaflow::device::testing::DeviceBackend;

std::vector<DeviceBackend> CudaBackends() {
  return {{"cuda", []() -> absl::StatusOr<std::unique_ptr<DeviceRuntime>> {
             auto created = CudaDevice::Create(0);
             if (!created.ok()) return created.status();
             return std::unique_ptr<DeviceRuntime>(std::move(*created));
           }}};
}

}  // namespace

RDMAFLOW_INSTANTIATE_DEVICE_CONFORMANCE(Cuda, CudaBackends)
