// File: moshpit_group.h
// -----------------------------------------------------------------------------
// Forming one Moshpit group for one round through the Store, so that a
// missing or dead peer shrinks its group instead of stalling it:
//   1. each peer takes a ticket (Add on <prefix>/count) and records its id
//      and a note (any text without spaces; moshpit lists the rings it
//      kept) under <prefix>/member/<ticket>;
//   2. the peer that takes the last expected ticket, or the first to reach
//      its deadline while polling, seals the group (the first Add on
//      <prefix>/seal) by writing the number of tickets taken then into
//      <prefix>/final (a count outside 1..2^20 read back is kDataLoss);
//   3. the group is the holders of tickets 1..final, ascending by id; a
//      peer whose ticket came later is alone this round (it rejoins the
//      next one).
// Every peer of a group gets the same list: the store's operations are
// atomic, and the seal is written once.
#ifndef RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GROUP_H_
#define RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GROUP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/store.h"

namespace rdmaflow::strategies::moshpit {

struct GroupMember {
  int id = 0;
  std::string note;
  bool operator==(const GroupMember& other) const {
    return id == other.id && note == other.note;
  }
};

// Joins the group under `prefix` (unique per round and group) as `id` with
// `note`, waiting up to `timeout` for the `expected` members. Returns the
// members, ascending by id (this one included). kInvalidArgument for a note
// with a space; store errors are returned.
absl::StatusOr<std::vector<GroupMember>> FormGroup(rdma::Store& store,
                                                   const std::string& prefix, int id,
                                                   const std::string& note, int expected,
                                                   absl::Duration timeout);

}  // namespace rdmaflow::strategies::moshpit

#endif  // RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GROUP_H_
