// File: slot_allocator.h
// -----------------------------------------------------------------------------
// LayoutSlots: places the slots of one receive region. Each slot has a size
// and a live interval [begin, end] (schedule positions, inclusive); two slots
// whose intervals intersect never overlap in memory, and slots that are never
// live together may share it.
//
// This is interval colouring with sizes (dynamic storage allocation), which
// is NP-hard in general; LayoutSlots keeps the lowest peak of three
// heuristics (ties to the earlier one):
//  - greedy by size, as TensorFlow Lite's arena planner: largest slot first,
//    each at the lowest offset free of the already placed slots live at the
//    same time (ties to the earlier interval, then the lower index). It costs
//    O(n log n + p log p) for p pairs of slots live together, so it runs only
//    while p <= max(2^16, 64 n);
//  - a sweep over time: a slot takes the best-fitting free block (coalesced,
//    ordered by size then offset) when it becomes live, or grows the peak,
//    and frees it after its last position; O(n log n);
//  - the same sweep with time running backwards.
// Deterministic. Inverted intervals (begin > end) count as live at begin.
#ifndef RDMAFLOW_GRAPH_ANALYZER_SLOT_ALLOCATOR_H_
#define RDMAFLOW_GRAPH_ANALYZER_SLOT_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace rdmaflow::graph {

struct SlotRequest {
  uint64_t bytes = 0;
  int live_begin = 0;
  int live_end = 0;
};

struct SlotLayout {
  std::vector<uint64_t> offsets;  // One per request, multiples of alignment.
  uint64_t peak = 0;              // End of the highest slot, aligned.
};

// `alignment` must be a power of two. With `share` false every slot gets its
// own memory (offsets in request order). O(n log n) either way.
SlotLayout LayoutSlots(absl::Span<const SlotRequest> requests,
                       uint64_t alignment, bool share);

// `value` rounded up to a multiple of `alignment` (a power of two).
uint64_t AlignUp(uint64_t value, uint64_t alignment);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_SLOT_ALLOCATOR_H_
