// File: shared_tensor_allocator.cc
#include "torch_backend/shared_tensor_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <sys/resource.h>

#include <atomic>
#include <cstdio>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/shared_segments.h"

namespace rdmaflow::torch_backend {
namespace {

// Above the default CPU allocator's (0), below what a caller that insists
// on its own would pick.
constexpr uint8_t kPriority = 10;

// One deleter for every allocation, so torch's raw interface works.
void Free(void* data) {
  if (data == nullptr) return;
  if (!collectives::SharedSegments::Process().Release(static_cast<std::byte*>(data))) {
    c10::free_cpu(data);
  }
}

class SharedTensorAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* data = nullptr;
    if (n >= min_bytes_.load(std::memory_order_relaxed)) {
      absl::StatusOr<std::byte*> segment = collectives::SharedSegments::Process().Allocate(n);
      if (segment.ok()) {
        data = *segment;
      } else if (!said_.exchange(true)) {
        std::fprintf(stderr,
                     "rdmaflow: a %zu-byte tensor (and any other that cannot) goes to "
                     "private memory instead of a shared segment: %s\n",
                     n, std::string(segment.status().message()).c_str());
      }
    }
    if (data == nullptr) data = c10::alloc_cpu(n);
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
  void set_min_bytes(size_t bytes) { min_bytes_.store(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<size_t> min_bytes_{SIZE_MAX};
  std::atomic<bool> said_{false};
};

SharedTensorAllocator& Allocator() {
  static auto* allocator = new SharedTensorAllocator;  // torch holds it for good
  return *allocator;
}

}  // namespace

absl::Status InstallSharedTensorAllocator(size_t min_bytes) {
  if (min_bytes == 0) {
    return absl::InvalidArgumentError("shared tensor allocator: a threshold of 0 bytes");
  }
  // Each segment holds a descriptor open (the peers open it through
  // /proc): a model's parameters, gradients and optimizer state may need
  // thousands, past a soft limit of 1024. Raised to the hard limit, as a
  // process may do; past that, tensors go to private memory (said once).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  SharedTensorAllocator& ours = Allocator();
  ours.set_min_bytes(min_bytes);
  if (c10::GetCPUAllocator() != &ours) c10::SetCPUAllocator(&ours, kPriority);
  if (c10::GetCPUAllocator() != &ours) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared tensor allocator: torch keeps the CPU allocator another library set at a "
        "higher priority than ", kPriority, "; ordinary tensors stay in private memory "
        "(RDMAFLOW_SHARED_TENSORS=off silences this)"));
  }
  return absl::OkStatus();
}

bool SharedTensorAllocatorInstalled() { return c10::GetCPUAllocator() == &Allocator(); }

}  // namespace rdmaflow::torch_backend
