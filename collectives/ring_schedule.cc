// File: ring_schedule.cc
#include "collectives/ring_schedule.h"

#include <algorithm>

namespace rdmaflow::collectives {

RingSchedule::RingSchedule(int n, int position, size_t count,
                           size_t piece_elements)
    : n_(n),
      position_(position),
      count_(count),
      piece_elements_(std::max<size_t>(piece_elements, 1)) {
  const size_t longest = count_ / n_ + (count_ % n_ != 0 ? 1 : 0);
  pieces_ = std::max<size_t>(1, (longest + piece_elements_ - 1) / piece_elements_);
}

int RingSchedule::Mod(int64_t k) const {
  const int64_t m = k % n_;
  return static_cast<int>(m < 0 ? m + n_ : m);
}

ElementRange RingSchedule::Segment(int k) const {
  const size_t base = count_ / n_;
  const size_t extra = count_ % n_;
  const size_t index = static_cast<size_t>(k);
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

ElementRange RingSchedule::Piece(int segment, size_t piece) const {
  const ElementRange s = Segment(segment);
  const size_t offset = std::min(s.count, piece * piece_elements_);
  return {s.begin + offset, std::min(piece_elements_, s.count - offset)};
}

ElementRange RingSchedule::Sent(size_t message) const {
  const int64_t step = static_cast<int64_t>(message / pieces_);
  const size_t piece = message % pieces_;
  if (step < n_ - 1) return Piece(Mod(position_ - step), piece);
  return Piece(Mod(position_ + 1 - (step - (n_ - 1))), piece);
}

ElementRange RingSchedule::Received(size_t message) const {
  const int64_t step = static_cast<int64_t>(message / pieces_);
  const size_t piece = message % pieces_;
  if (step < n_ - 1) return Piece(Mod(position_ - step - 1), piece);
  return Piece(Mod(position_ - (step - (n_ - 1))), piece);
}

}  // namespace rdmaflow::collectives
