// File: members.h
// -----------------------------------------------------------------------------
// The member list every collective takes: distinct global ranks >= 0, in
// the order the collective uses, including the caller's.
#ifndef RDMAFLOW_COLLECTIVES_MEMBERS_H_
#define RDMAFLOW_COLLECTIVES_MEMBERS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::collectives {

// `rank`'s position in `members`. kInvalidArgument, prefixed by `what`
// ("all-reduce 'x'"), for a negative or repeated rank or one missing.
absl::StatusOr<int> PositionOf(const std::vector<int>& members, int rank,
                               absl::string_view what);

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_MEMBERS_H_
