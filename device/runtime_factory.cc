// File: runtime_factory.cc
#include "device/runtime_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_device.h"
#include "device/fake/fake_device.h"

namespace rdmaflow::device {

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(absl::string_view kind,
                                                                   int index) {
  if (kind == "cuda") {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> cuda, CudaDevice::Create(index));
    return std::unique_ptr<DeviceRuntime>(std::move(cuda));
  }
  if (kind == "fake") {
    ASSIGN_OR_RETURN(std::unique_ptr<FakeDevice> fake, FakeDevice::Create(FakeDeviceOptions{}));
    return std::unique_ptr<DeviceRuntime>(std::move(fake));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no device runtime '", kind, "': the kinds are cuda and fake"));
}

}  // namespace rdmaflow::device
