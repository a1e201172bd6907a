// File: gpu_probe.h
// -----------------------------------------------------------------------------
// ProbeGpus: the GPUs the CUDA driver shows, for `rdmaflow info`. It loads
// the driver library at run time (libcuda.so.1) and asks it through the
// driver API, so it needs no CUDA toolkit to build, links no CUDA runtime,
// and creates no context on any device.
#ifndef RDMAFLOW_DEVICE_GPU_PROBE_H_
#define RDMAFLOW_DEVICE_GPU_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdmaflow::device {

struct GpuInfo {
  int index = 0;
  std::string name;       // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability: sm_<major><minor>
  uint64_t memory_bytes = 0;
};

struct GpuReport {
  int driver_version = 0;  // CUDA's encoding: 13000 is 13.0
  std::vector<GpuInfo> gpus;
};

// kUnavailable saying why where no driver answers (no libcuda.so.1, or its
// cuInit failed, with the driver's error name).
absl::StatusOr<GpuReport> ProbeGpus();

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_GPU_PROBE_H_
