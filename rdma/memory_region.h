// File: memory_region.h
// -----------------------------------------------------------------------------
// MemoryRegion: a local block of memory registered with a Transport, so that
// it can be the source or target of one-sided operations. It carries the
// RemoteRegion descriptor that peers need to access it.
#ifndef RDMAFLOW_RDMA_MEMORY_REGION_H_
#define RDMAFLOW_RDMA_MEMORY_REGION_H_

#include <cstddef>
#include <memory>

#include "absl/types/span.h"
#include "rdma/remote_region.h"

namespace rdmaflow::rdma {

// Owns one registration (and, for Transport::Allocate, the memory itself).
// Destroying it deregisters; memory passed to Transport::Register must outlive
// the MemoryRegion. Peers must stop accessing the region before it is
// destroyed: a later access gets kPermissionDenied on loopback, and is
// undefined on real hardware. Move-only. Thread-compatible.
class MemoryRegion {
 public:
  // Backend state of a registration; its destructor deregisters (and frees
  // memory the backend allocated). Destructors log failures, never throw.
  class Registration {
   public:
    virtual ~Registration() = default;
  };

  MemoryRegion() = default;
  MemoryRegion(std::byte* data, size_t size, RemoteRegion descriptor,
               std::unique_ptr<Registration> registration)
      : data_(data),
        size_(size),
        descriptor_(std::move(descriptor)),
        registration_(std::move(registration)) {}

  MemoryRegion(MemoryRegion&&) = default;
  MemoryRegion& operator=(MemoryRegion&&) = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<std::byte> span() const { return {data_, size_}; }

  // What peers need to access this region; publish descriptor().Serialize().
  const RemoteRegion& descriptor() const { return descriptor_; }

  // For the backend that created the region.
  Registration* registration() const { return registration_.get(); }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  RemoteRegion descriptor_;
  std::unique_ptr<Registration> registration_;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_MEMORY_REGION_H_
