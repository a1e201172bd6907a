#include "runtime/torch/torch_cuda.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"

namespace rdmaflow::runtime::torch {
namespace {

// The folder of the libc10.so this process loaded (the torch it was built
// against), found among the loaded objects: a symbol's address would not
// do, as a statically linked executable may hold a copy of the data.
int FindTorchFolder(struct dl_phdr_info* info, size_t, void* data) {
  const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos || name.compare(slash + 1, 9, "libc10.so") != 0) return 0;
  // Through links (Bazel's _solib folders link torch's libraries).
  char* real = realpath(name.c_str(), nullptr);
  const std::string path = real != nullptr ? real : name;
  free(real);
  *static_cast<std::string*>(data) = path.substr(0, path.rfind('/') + 1);
  return 1;
}

// libtorch_cuda.so from that folder, else wherever the loader finds one.
void* OpenTorchCuda(std::string& error) {
  std::string folder;
  dl_iterate_phdr(FindTorchFolder, &folder);
  if (!folder.empty()) {
    const std::string path = folder + "libtorch_cuda.so";
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
      // ATen looks its CUDA hooks up once: a lookup before the library was
      // loaded keeps the stub, and every later CUDA call fails ("Cannot
      // initialize CUDA without ATen_cuda library").
      if (!at::detail::getCUDAHooks().hasCUDA()) {
        return absl::FailedPreconditionError(
            "torch's CUDA library was loaded after this process asked torch about CUDA "
            "(torch::manual_seed does): load it first (LoadTorchCuda before any torch call)");
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("asking torch for GPUs: ", e.what()));
    }
    return absl::OkStatus();
  }();
  return loaded;
}

}  // namespace rdmaflow::runtime::torch
