// File: pool_allocator.h
// -----------------------------------------------------------------------------
// PoolAllocator: hands out aligned byte ranges of one fixed-size pool (a
// registered MemoryRegion, addressed by offset) and takes them back, merging
// neighbours. Used for dynamic-tensor sources and destinations and by the
// registered-memory LibTorch allocator: registration happens once, for the
// whole pool, never per tensor.
#ifndef RDMAFLOW_RUNTIME_POOL_ALLOCATOR_H_
#define RDMAFLOW_RUNTIME_POOL_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace rdmaflow::runtime {

// First fit over a free list ordered by offset. Thread-compatible.
class PoolAllocator {
 public:
  // `alignment`: a power of two; every offset handed out is a multiple.
  PoolAllocator(size_t capacity, size_t alignment);

  // An offset of `bytes` (> 0) free bytes. kResourceExhausted saying how much
  // is free (and the largest free range) when no range fits.
  absl::StatusOr<size_t> Allocate(size_t bytes);

  // Returns a range from Allocate(). Freeing an unknown offset is a bug
  // (checked).
  void Free(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t allocations() const { return allocated_.size(); }

 private:
  const size_t capacity_;
  const size_t alignment_;
  size_t used_ = 0;
  std::map<size_t, size_t> free_;       // offset -> bytes
  std::map<size_t, size_t> allocated_;  // offset -> bytes
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_POOL_ALLOCATOR_H_
