// File: memory_kind.h
// -----------------------------------------------------------------------------
// MemoryKind: where memory lives, host or an accelerator's. Shared by the
// device runtime (what a pointer is) and rdma/ (what a region descriptor
// names), so that a region of one kind is never taken for the other.
#ifndef RDMAFLOW_DEVICE_MEMORY_KIND_H_
#define RDMAFLOW_DEVICE_MEMORY_KIND_H_

#include <cstdint>

namespace rdmaflow::device {

// The values travel in region descriptors: never renumber them.
enum class MemoryKind : uint8_t {
  kHost = 0,    // pageable or pinned host memory
  kDevice = 1,  // memory of an accelerator (CUDA or the fake device)
};

// "host", "device"; "unknown" for any other value.
inline const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kDevice:
      return "device";
  }
  return "unknown";
}

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_MEMORY_KIND_H_
