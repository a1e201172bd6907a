// File: pool_allocator.cc
#include "runtime/pool_allocator.h"

#include <algorithm>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "common/text_table.h"

namespace rdmaflow::runtime {

PoolAllocator::PoolAllocator(size_t capacity, size_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  ABSL_RAW_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
                 "pool alignment must be a power of two");
  const size_t usable = capacity - capacity % alignment;
  if (usable > 0) free_.emplace(0, usable);
}

absl::StatusOr<size_t> PoolAllocator::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("cannot allocate 0 bytes from a pool");
  }
  const size_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
  size_t largest = 0;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    largest = std::max(largest, it->second);
    if (it->second < rounded) continue;
    const size_t offset = it->first;
    const size_t rest = it->second - rounded;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + rounded, rest);
    allocated_.emplace(offset, rounded);
    used_ += rounded;
    return offset;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "registered pool of ", FormatBytes(capacity_), " cannot hold ",
      FormatBytes(bytes), ": ", FormatBytes(capacity_ - used_),
      " free, largest free range ", FormatBytes(largest)));
}

void PoolAllocator::Free(size_t offset) {
  auto it = allocated_.find(offset);
  ABSL_RAW_CHECK(it != allocated_.end(), "freeing an unknown pool offset");
  size_t begin = offset;
  size_t size = it->second;
  allocated_.erase(it);
  used_ -= size;
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == begin + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(begin, size);
}

}  // namespace rdmaflow::runtime
