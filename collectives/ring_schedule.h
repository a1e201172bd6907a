// File: ring_schedule.h
// -----------------------------------------------------------------------------
// The message schedule of a ring all-reduce, as pure arithmetic (no
// transport), so it can be checked on its own.
//
// `count` elements are cut into n segments (the first count % n one element
// longer, so any size works) and each segment into `pieces` pieces of at
// most `piece_elements` (trailing pieces of short segments may be empty).
// The ring position i sends to i+1 and receives from i-1, in 2(n-1) steps of
// `pieces` messages each; message j is step j / pieces, piece j % pieces:
//   reduce-scatter, step t < n-1: send segment i-t, receive segment i-t-1
//     and reduce it into ours;
//   all-gather, step t = n-1+u: send segment i+1-u, receive segment i-u
//     (written straight into our buffer; no reduction).
// After the reduce-scatter position i holds the full reduction of segment
// i+1. Message j (j >= pieces) sends what message j - pieces received.
#ifndef RDMAFLOW_COLLECTIVES_RING_SCHEDULE_H_
#define RDMAFLOW_COLLECTIVES_RING_SCHEDULE_H_

#include <cstddef>
#include <cstdint>

namespace rdmaflow::collectives {

// [begin, begin + count) in elements.
struct ElementRange {
  size_t begin = 0;
  size_t count = 0;
};

// Value type.
class RingSchedule {
 public:
  // n >= 1 ranks, position in [0, n), piece_elements >= 1.
  RingSchedule(int n, int position, size_t count, size_t piece_elements);

  int ranks() const { return n_; }
  size_t pieces() const { return pieces_; }
  // Messages each position sends (and receives): 2 (n-1) pieces.
  size_t messages() const { return 2 * static_cast<size_t>(n_ - 1) * pieces_; }
  bool is_reduce(size_t message) const {
    return message / pieces_ < static_cast<size_t>(n_ - 1);
  }
  // The elements message `message` sends from our buffer, and those it
  // receives (into our buffer, or reduced into it).
  ElementRange Sent(size_t message) const;
  ElementRange Received(size_t message) const;

  // Segment k's elements.
  ElementRange Segment(int k) const;

 private:
  ElementRange Piece(int segment, size_t piece) const;
  int Mod(int64_t k) const;

  int n_;
  int position_;
  size_t count_;
  size_t piece_elements_;
  size_t pieces_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_RING_SCHEDULE_H_
