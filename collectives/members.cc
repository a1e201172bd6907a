// File: members.cc
#include "collectives/members.h"

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::collectives {

absl::StatusOr<int> PositionOf(const std::vector<int>& members, int rank,
                               absl::string_view what) {
  absl::flat_hash_set<int> seen;
  int position = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || !seen.insert(members[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": members must be distinct ranks >= 0, got [", absl::StrJoin(members, ","),
          "]"));
    }
    if (members[i] == rank) position = static_cast<int>(i);
  }
  if (position < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", rank,
                                                   " is not among its members [",
                                                   absl::StrJoin(members, ","), "]"));
  }
  return position;
}

}  // namespace rdmaflow::collectives
