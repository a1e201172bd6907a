// File: runtime_factory.h
// -----------------------------------------------------------------------------
// A device runtime by name, for command-line tools (`--device=cuda|fake`):
//   "cuda"  device `index` through CUDA (kUnavailable where no driver
//           answers, with CUDA's reason)
//   "fake"  the fake device: host shared memory standing in for device
//           memory, for machines without a GPU (device/fake)
#ifndef RDMAFLOW_DEVICE_RUNTIME_FACTORY_H_
#define RDMAFLOW_DEVICE_RUNTIME_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

// kInvalidArgument naming the kinds for any other name.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(absl::string_view kind,
                                                                   int index = 0);

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_RUNTIME_FACTORY_H_
