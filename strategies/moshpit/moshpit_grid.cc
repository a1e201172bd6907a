// File: moshpit_grid.cc
#include "strategies/moshpit/moshpit_grid.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::strategies::moshpit {

absl::StatusOr<MoshpitGrid> MoshpitGrid::Create(int ranks, int side, int dims) {
  if (ranks < 1 || side < 2 || dims < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moshpit grid: needs ranks >= 1, side M >= 2 and dims d >= 0, got ", ranks,
        " ranks, M=", side, ", d=", dims));
  }
  int derived = 1;
  long long capacity = side;
  while (capacity < ranks) {
    capacity *= side;
    ++derived;
  }
  if (dims == 0) dims = derived;
  if (dims < derived) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moshpit grid ", side, "^", dims, " has fewer places than the ", ranks,
        " ranks; use dims >= ", derived));
  }
  return MoshpitGrid(ranks, side, dims);
}

std::vector<int> MoshpitGrid::Coordinates(int rank) const {
  std::vector<int> c(dims_);
  for (int i = 0; i < dims_; ++i) {
    c[i] = rank % side_;
    rank /= side_;
  }
  return c;
}

std::string MoshpitGrid::GroupKey(int rank, int round) const {
  const int free = round % dims_;
  std::vector<int> c = Coordinates(rank);
  std::vector<std::string> parts;
  for (int i = 0; i < dims_; ++i) parts.push_back(i == free ? "*" : absl::StrCat(c[i]));
  return absl::StrCat("d", free, ":", absl::StrJoin(parts, "."));
}

std::vector<int> MoshpitGrid::GroupOf(int rank, int round) const {
  // The peers differ from `rank` only in the free dimension's digit: rank
  // with that digit replaced by 0..M-1, as long as they are ranks. Strides
  // past the ranks (a large d) leave `rank` alone in its group.
  const int free = round % dims_;
  int64_t stride = 1;
  for (int i = 0; i < free && stride <= ranks_; ++i) stride *= side_;
  if (stride > ranks_) return {rank};
  const int64_t digit = (rank / stride) % side_;
  const int64_t base = rank - digit * stride;
  std::vector<int> group;
  for (int64_t v = 0; v < side_; ++v) {
    const int64_t peer = base + v * stride;
    if (peer >= ranks_) break;
    group.push_back(static_cast<int>(peer));
  }
  return group;
}

}  // namespace rdmaflow::strategies::moshpit
