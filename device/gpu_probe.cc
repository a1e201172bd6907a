// File: gpu_probe.cc
#include "device/gpu_probe.h"

#include <dlfcn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::device {
namespace {

// The few driver-API entry points used, declared here: no CUDA header.
using CuResult = int;  // CUresult; 0 is CUDA_SUCCESS
using CuInit = CuResult (*)(unsigned);
using CuDriverGetVersion = CuResult (*)(int*);
using CuDeviceGetCount = CuResult (*)(int*);
using CuDeviceGet = CuResult (*)(int*, int);
using CuDeviceGetName = CuResult (*)(char*, int, int);
using CuDeviceGetAttribute = CuResult (*)(int*, int, int);
using CuDeviceTotalMem = CuResult (*)(size_t*, int);
using CuGetErrorName = CuResult (*)(CuResult, const char**);
constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_...
constexpr int kComputeCapabilityMinor = 76;

template <typename F>
F Symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

}  // namespace

absl::StatusOr<GpuReport> ProbeGpus() {
  // Kept loaded: unloading a driver library is not worth its risks.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver (", dlerror(), ")"));
  }
  auto init = Symbol<CuInit>(library, "cuInit");
  auto version = Symbol<CuDriverGetVersion>(library, "cuDriverGetVersion");
  auto count = Symbol<CuDeviceGetCount>(library, "cuDeviceGetCount");
  auto get = Symbol<CuDeviceGet>(library, "cuDeviceGet");
  auto name = Symbol<CuDeviceGetName>(library, "cuDeviceGetName");
  auto attribute = Symbol<CuDeviceGetAttribute>(library, "cuDeviceGetAttribute");
  auto memory = Symbol<CuDeviceTotalMem>(library, "cuDeviceTotalMem_v2");
  auto error_name = Symbol<CuGetErrorName>(library, "cuGetErrorName");
  if (!init || !version || !count || !get || !name || !attribute || !memory) {
    return absl::UnavailableError(
        "libcuda.so.1 lacks the driver API entry points rdmaflow asks for");
  }
  if (CuResult r = init(0); r != 0) {
    std::string why = absl::StrCat("error ", r);
    const char* text = nullptr;
    if (error_name != nullptr && error_name(r, &text) == 0 && text != nullptr) {
      why = text;
    }
    return absl::UnavailableError(
        absl::StrCat("the CUDA driver did not start (cuInit: ", why, ")"));
  }
  GpuReport report;
  version(&report.driver_version);
  int n = 0;
  if (count(&n) != 0) n = 0;
  for (int i = 0; i < n; ++i) {
    int device = 0;
    if (get(&device, i) != 0) continue;
    GpuInfo gpu;
    gpu.index = i;
    char text[256] = {};
    if (name(text, sizeof(text) - 1, device) == 0) gpu.name = text;
    attribute(&gpu.major, kComputeCapabilityMajor, device);
    attribute(&gpu.minor, kComputeCapabilityMinor, device);
    size_t bytes = 0;
    if (memory(&bytes, device) == 0) gpu.memory_bytes = bytes;
    report.gpus.push_back(gpu);
  }
  return report;
}

}  // namespace rdmaflow::device
