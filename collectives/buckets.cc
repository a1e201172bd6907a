// File: buckets.cc
#include "collectives/buckets.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::collectives {

absl::StatusOr<FusedLayout> LayOut(const std::vector<size_t>& tensor_bytes,
                                   size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused layout: alignment ", alignment,
                     " is not a power of two"));
  }
  FusedLayout layout;
  size_t at = 0;
  for (size_t bytes : tensor_bytes) {
    layout.offsets.push_back(at);
    at = (at + bytes + alignment - 1) & ~(alignment - 1);
  }
  layout.total_bytes = at;
  return layout;
}

absl::StatusOr<std::vector<Bucket>> MakeBuckets(
    const std::vector<size_t>& tensor_bytes, const FusedLayout& layout,
    size_t bucket_bytes) {
  if (layout.offsets.size() != tensor_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buckets: a layout of ", layout.offsets.size(), " tensors for ",
        tensor_bytes.size(), " tensors"));
  }
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const size_t end = layout.offsets[i] + tensor_bytes[i];
    if (!buckets.empty() &&
        (bucket_bytes == 0 || end - buckets.back().offset <= bucket_bytes)) {
      buckets.back().end = i + 1;
      buckets.back().bytes = end - buckets.back().offset;
      continue;
    }
    buckets.push_back({i, i + 1, layout.offsets[i], tensor_bytes[i]});
  }
  return buckets;
}

}  // namespace rdmaflow::collectives
