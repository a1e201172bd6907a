// File: slot_allocator.h
// -----------------------------------------------------------------------------
// LayoutSlots: places the slots of one receive region. Each slot has a size
// and a live interval [begin, end] (schedule positions, inclusive); two slots
// whose intervals intersect never overlap in memory, and slots that are never
// live together may share it.
//
// This is interval colouring with sizes (dynamic storage allocation), which
// is NP-hard in general; we use the greedy-by-size heuristic that
// TensorFlow Lite's arena planner uses: largest slot first, each at the lowest
// aligned offset that does not collide with an already placed slot live at
// the same time. Deterministic: ties go to the earlier interval, then the
// lower index.
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
// own memory (offsets in request order).
SlotLayout LayoutSlots(absl::Span<const SlotRequest> requests,
                       uint64_t alignment, bool share);

// `value` rounded up to a multiple of `alignment` (a power of two).
uint64_t AlignUp(uint64_t value, uint64_t alignment);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_SLOT_ALLOCATOR_H_
