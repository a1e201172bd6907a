#include "runtime/torch/torch_cuda.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"

namespace rdmaflow::runtime::torch {
namespace {

// libtorch_cuda.so from the folder of the libc10.so this process uses (the
// torch it was built against), else wherever the loader finds one.
void* OpenTorchCuda(std::string& error) {
  Dl_info info;
  if (dladdr(static_cast<const void*>(&c10::impl::device_guard_impl_registry[0]), &info) != 0 &&
      info.dli_fname != nullptr) {
    // Through links (Bazel's _solib folders link torch's libraries).
    char* real = realpath(info.dli_fname, nullptr);
    std::string path = real != nullptr ? real : info.dli_fname;
    free(real);
    path = path.substr(0, path.rfind('/') + 1) + "libtorch_cuda.so";
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    error = dlerror();
  }
  if (void* handle = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL)) return handle;
  if (error.empty()) error = dlerror();
  return nullptr;
}

}  // namespace

absl::Status LoadTorchCuda() {
  static const absl::Status loaded = []() -> absl::Status {
    std::string error;
    if (OpenTorchCuda(error) == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "loading torch's CUDA library (libtorch_cuda.so, beside libc10.so): ", error));
    }
    try {
      const c10::DeviceType cuda = c10::DeviceType::CUDA;
      if (!c10::impl::hasDeviceGuardImpl(cuda) ||
          c10::impl::getDeviceGuardImpl(cuda)->deviceCount() <= 0) {
        return absl::UnavailableError(
            "torch's CUDA library is loaded, but it sees no GPU (no driver, or "
            "CUDA_VISIBLE_DEVICES hides them)");
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("asking torch for GPUs: ", e.what()));
    }
    return absl::OkStatus();
  }();
  return loaded;
}

}  // namespace rdmaflow::runtime::torch
