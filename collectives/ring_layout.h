// File: ring_layout.h
// -----------------------------------------------------------------------------
// The ring all-reduce's wire layout, shared by the ring and its hostile-peer
// tests.
//
// Its slot rings run on slot links (onesided/slots/slot_link.h), which lay
// out their own flags, credits and staging:
//   - "data" (kDataRing): to the right neighbour, `slots` staging slots of
//     `chunk` bytes (the reduce-scatter's and, past gather_in_slots_from,
//     the all-gather's messages); credited back on the control lane;
//   - "calls" (kCallsRing): call descriptors to the left neighbour,
//     kCallSlots slots of kDescriptorBytes; credited back on the data lane.
// With 2 members both rings of each direction are on the one link, data
// first. A descriptor is four words: the offset of the call's range in its
// member's data region, its count, its call word (call_word.h) and the
// call's number (0, 1, ... since Create()).
//
// The ring's own control region holds what is not a slot ring (byte offsets):
//   Abort(true)     abort word, written by the left neighbour
//   Abort(false)    abort word, written by the right neighbour
//   AbortSource()   source of our abort writes
#ifndef RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_
#define RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace rdmaflow::collectives::ring_layout {

inline constexpr size_t kWord = sizeof(uint64_t);
inline constexpr char kDataRing[] = "data";
inline constexpr char kCallsRing[] = "calls";
inline constexpr int kCallSlots = 2;
inline constexpr size_t kDescriptorBytes = 4 * kWord;

// The abort word the left neighbour writes (from_left) or the right one.
constexpr size_t Abort(bool from_left) { return from_left ? 0 : kWord; }
constexpr size_t AbortSource() { return 2 * kWord; }
constexpr size_t ControlBytes() { return 64; }

}  // namespace rdmaflow::collectives::ring_layout

#endif  // RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_
