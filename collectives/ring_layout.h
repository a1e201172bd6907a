// File: ring_layout.h
// -----------------------------------------------------------------------------
// Where the ring all-reduce keeps its words in a member's control region
// (byte offsets; `slots` is the staging slots it allocated, `chunk` its
// chunk bytes). Shared by the ring and its hostile-peer tests.
//
//   [0, S)          flag words, written by the left neighbour
//   S               credit word, written by the right neighbour
//   [S+1, 2S+1)     sources of our flag writes
//   2S+1            source of our credit write
//   Staging()       S staging slots of `chunk` bytes (the left writes)
//   Calls():        the call descriptors' slot ring (right to left):
//     +0  .. +16    kCallSlots flag words, written by the right neighbour
//     +16           credit word, written by the left neighbour
//     +24 .. +40    sources of our descriptor flags
//     +40           source of our descriptor credit
//     +48, +56      abort words, written by the left and the right neighbour
//     +64           source of our abort writes
//     +128          kCallSlots descriptors, written by the right neighbour
//     +192          sources of our descriptors
// A descriptor (kDescriptorBytes) is four words: the offset of the call's
// range in its member's data region, its count, its call word
// (call_word.h) and the call's number (0, 1, ... since Create()).
#ifndef RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_
#define RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace rdmaflow::collectives::ring_layout {

inline constexpr size_t kWord = sizeof(uint64_t);
inline constexpr int kCallSlots = 2;
inline constexpr size_t kDescriptorBytes = 4 * kWord;

constexpr size_t Flags() { return 0; }
constexpr size_t Credit(int slots) { return slots * kWord; }
constexpr size_t FlagSources(int slots) { return (slots + 1) * kWord; }
constexpr size_t CreditSource(int slots) { return (2 * slots + 1) * kWord; }
constexpr size_t Staging(int slots) { return ((2 * slots + 2) * kWord + 63) / 64 * 64; }
constexpr size_t Calls(int slots, size_t chunk) {
  return (Staging(slots) + slots * chunk + 63) / 64 * 64;
}
constexpr size_t CallFlags(int slots, size_t chunk) { return Calls(slots, chunk); }
constexpr size_t CallCredit(int slots, size_t chunk) {
  return Calls(slots, chunk) + kCallSlots * kWord;
}
constexpr size_t CallFlagSources(int slots, size_t chunk) {
  return Calls(slots, chunk) + (kCallSlots + 1) * kWord;
}
constexpr size_t CallCreditSource(int slots, size_t chunk) {
  return Calls(slots, chunk) + (2 * kCallSlots + 1) * kWord;
}
// The abort word the left neighbour writes (from_left) or the right one.
constexpr size_t Abort(int slots, size_t chunk, bool from_left) {
  return Calls(slots, chunk) + (from_left ? 6 : 7) * kWord;
}
constexpr size_t AbortSource(int slots, size_t chunk) { return Calls(slots, chunk) + 8 * kWord; }
constexpr size_t Descriptors(int slots, size_t chunk) { return Calls(slots, chunk) + 128; }
constexpr size_t DescriptorSources(int slots, size_t chunk) {
  return Descriptors(slots, chunk) + kCallSlots * kDescriptorBytes;
}
constexpr size_t ControlBytes(int slots, size_t chunk) {
  return DescriptorSources(slots, chunk) + kCallSlots * kDescriptorBytes;
}

}  // namespace rdmaflow::collectives::ring_layout

#endif  // RDMAFLOW_COLLECTIVES_RING_LAYOUT_H_
