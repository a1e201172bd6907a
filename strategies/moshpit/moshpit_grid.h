// File: moshpit_grid.h
// -----------------------------------------------------------------------------
// Moshpit All-Reduce's virtual grid (Ryabinin et al., NeurIPS 2021): peers
// sit at coordinates on an M^d grid (rank r: the d base-M digits of r); in
// round t they average within groups of peers that share every coordinate
// except dimension t mod d. On a full grid, d rounds give every peer the
// exact global average.
#ifndef RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GRID_H_
#define RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GRID_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdmaflow::strategies::moshpit {

// Value type.
class MoshpitGrid {
 public:
  // `side` M >= 2 and `dims` d >= 1 with M^d >= ranks; dims 0 derives the
  // smallest d that fits the ranks. kInvalidArgument otherwise.
  static absl::StatusOr<MoshpitGrid> Create(int ranks, int side, int dims);

  int side() const { return side_; }
  int dims() const { return dims_; }
  std::vector<int> Coordinates(int rank) const;
  // The group `rank` belongs to in `round`, as a key ("d1:0.1") shared by
  // exactly the peers that differ from it only in dimension round % d.
  std::string GroupKey(int rank, int round) const;
  // The ranks (< ranks) of that group, ascending. round >= 0.
  std::vector<int> GroupOf(int rank, int round) const;

 private:
  MoshpitGrid(int ranks, int side, int dims) : ranks_(ranks), side_(side), dims_(dims) {}
  int ranks_;
  int side_;
  int dims_;
};

}  // namespace rdmaflow::strategies::moshpit

#endif  // RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GRID_H_
