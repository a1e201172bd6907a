// File: moshpit_group.h
// -----------------------------------------------------------------------------
// Forming one Moshpit group for one round through the Store, so that a
// missing or dead peer shrinks its group instead of stalling it:
//   1. each peer takes a ticket (Add on <prefix>/count) and records its id
//      and a note (any text without spaces; moshpit lists the rings it
//      kept) under <prefix>/member/<ticket>;
//   2. the peer that takes the last expected ticket, or the first to reach
//      its deadline while polling, seals the group (the first Add on
//      <prefix>/seal): it reads the records of the tickets taken then,
//      leaving out a ticket whose holder died before writing its record
//      (none came within a short grace), a record that does not parse and
//      an id listed already, and writes the members it found into
//      <prefix>/final, one line "<ticket> <id> <note>" each;
//   3. the group is the members listed in the seal, ascending by id; a
//      peer not listed (its ticket came later, or its record too late) is
//      alone this round (it rejoins the next one).
// A peer that waits for the seal longer than twice the grace gives up by
// closing the group (the first Add on <prefix>/closed); the sealer closes
// it too before writing the seal, and a sealer that finds it closed writes
// an empty seal: everyone is alone this round. So every peer of a group
// gets the same list (the store's operations are atomic, and the seal is
// written once), even when the sealer is slow or dies. What the store holds is written by
// peers: the seal is checked before it is used (tickets increasing and no
// more than were taken, ids in 0..world-1 and distinct, this peer's own
// line its own), and a seal that fails a check is kDataLoss.
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

// Joins the group under `prefix` (unique per round and group) as `id` (in
// 0..world-1) with `note`, waiting up to `timeout` for the `expected`
// members; every store wait after that ends within a few seconds' grace. Returns the members, ascending by id (this one included).
// kInvalidArgument for a note with a space or an id outside the world;
// kDataLoss for a seal or record that fails its checks; store errors are
// returned.
absl::StatusOr<std::vector<GroupMember>> FormGroup(rdma::Store& store,
                                                   const std::string& prefix, int id,
                                                   const std::string& note, int expected,
                                                   int world, absl::Duration timeout);

}  // namespace rdmaflow::strategies::moshpit

#endif  // RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_GROUP_H_
