// File: slot_allocator.cc
#include "graph_analyzer/slot_allocator.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "absl/base/macros.h"

namespace rdmaflow::graph {
namespace {

bool Intersect(const SlotRequest& a, const SlotRequest& b) {
  return a.live_begin <= b.live_end && b.live_begin <= a.live_end;
}

}  // namespace

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

SlotLayout LayoutSlots(absl::Span<const SlotRequest> requests,
                       uint64_t alignment, bool share) {
  SlotLayout layout;
  layout.offsets.resize(requests.size());
  if (!share) {
    for (size_t i = 0; i < requests.size(); ++i) {
      layout.offsets[i] = layout.peak;
      layout.peak += AlignUp(requests[i].bytes, alignment);
    }
    return layout;
  }
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const SlotRequest& ra = requests[a];
    const SlotRequest& rb = requests[b];
    return std::make_tuple(-static_cast<int64_t>(AlignUp(ra.bytes, alignment)),
                           ra.live_begin, a) <
           std::make_tuple(-static_cast<int64_t>(AlignUp(rb.bytes, alignment)),
                           rb.live_begin, b);
  });
  // Placed slots live at the same time as the current one, by offset.
  std::vector<size_t> placed;
  std::vector<size_t> live;
  for (size_t i : order) {
    uint64_t size = AlignUp(requests[i].bytes, alignment);
    live.clear();
    for (size_t j : placed) {
      if (Intersect(requests[i], requests[j])) live.push_back(j);
    }
    std::sort(live.begin(), live.end(), [&](size_t a, size_t b) {
      return layout.offsets[a] < layout.offsets[b];
    });
    // First gap that fits, scanning up from 0.
    uint64_t offset = 0;
    for (size_t j : live) {
      uint64_t begin = layout.offsets[j];
      uint64_t end = begin + AlignUp(requests[j].bytes, alignment);
      if (begin >= offset + size) break;
      offset = std::max(offset, end);
    }
    ABSL_ASSERT(offset % alignment == 0);
    layout.offsets[i] = offset;
    layout.peak = std::max(layout.peak, offset + size);
    placed.push_back(i);
  }
  return layout;
}

}  // namespace rdmaflow::graph
