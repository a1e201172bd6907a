// File: moshpit_group.cc
#include "strategies/moshpit/moshpit_group.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies::moshpit {
namespace {

// More tickets than any group can take (a group is one grid line).
constexpr int64_t kMaxGroupTickets = 1 << 20;

}  // namespace

absl::StatusOr<std::vector<GroupMember>> FormGroup(rdma::Store& store,
                                                   const std::string& prefix, int id,
                                                   const std::string& note, int expected,
                                                   absl::Duration timeout) {
  if (note.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("moshpit group ", prefix, ": a note may not hold spaces: '", note, "'"));
  }
  ASSIGN_OR_RETURN(int64_t ticket, store.Add(prefix + "/count", 1));
  RETURN_IF_ERROR(
      store.Set(absl::StrCat(prefix, "/member/", ticket), absl::StrCat(id, " ", note)));
  const absl::Time deadline = absl::Now() + timeout;
  // The holder of the last expected ticket seals at once; the others poll
  // with Adds of 0 (they answer at once) until the group is sealed, backing
  // off to a poll per millisecond: the store's server shares the cores with
  // the training ranks. Every store call is a round trip on each round's
  // critical path: the sealer does not read back the count it wrote, and
  // nobody reads back its own record.
  int64_t final_count = -1;  // known here only to the sealer
  bool sealed = false;
  absl::Duration backoff = absl::Microseconds(20);
  if (ticket >= expected) {
    ASSIGN_OR_RETURN(int64_t first, store.Add(prefix + "/seal", 1));
    if (first == 1) {
      ASSIGN_OR_RETURN(final_count, store.Add(prefix + "/count", 0));
      RETURN_IF_ERROR(store.Set(prefix + "/final", absl::StrCat(final_count)));
    }
    sealed = true;
  }
  while (!sealed) {
    ASSIGN_OR_RETURN(int64_t sealing, store.Add(prefix + "/seal", 0));
    if (sealing > 0) break;
    ASSIGN_OR_RETURN(int64_t taken, store.Add(prefix + "/count", 0));
    if (taken >= expected || absl::Now() >= deadline) {
      ASSIGN_OR_RETURN(int64_t first, store.Add(prefix + "/seal", 1));
      if (first == 1) {
        ASSIGN_OR_RETURN(final_count, store.Add(prefix + "/count", 0));
        RETURN_IF_ERROR(store.Set(prefix + "/final", absl::StrCat(final_count)));
      }
      break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(1));
  }
  if (final_count < 0) {
    // The sealer writes /final right after winning the seal.
    ASSIGN_OR_RETURN(std::string text, store.Get(prefix + "/final", absl::Seconds(60)));
    if (!absl::SimpleAtoi(text, &final_count)) {
      return absl::DataLossError(absl::StrCat("moshpit group ", prefix, ": the sealed count '",
                                              text, "' is not a number; a peer wrote a bad seal "
                                              "into the store"));
    }
  }
  // Written by a peer through the store: at least the sealer's own ticket,
  // and no more tickets than were taken (bounded before it sizes a loop of
  // reads).
  if (final_count < 1 || final_count > kMaxGroupTickets) {
    return absl::DataLossError(absl::StrCat(
        "moshpit group ", prefix, ": the sealed member count is ", final_count,
        ", outside 1..", kMaxGroupTickets, "; a peer wrote a bad seal into the store"));
  }
  if (ticket > final_count) {
    return std::vector<GroupMember>{{id, note}};  // too late: alone
  }
  std::vector<GroupMember> members;
  members.push_back({id, note});
  for (int64_t i = 1; i <= final_count; ++i) {
    if (i == ticket) continue;
    ASSIGN_OR_RETURN(std::string member,
                     store.Get(absl::StrCat(prefix, "/member/", i), absl::Seconds(60)));
    const size_t space = member.find(' ');
    GroupMember parsed;
    if (space == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(member).substr(0, space), &parsed.id)) {
      return absl::InternalError(absl::StrCat("moshpit group ", prefix, ": member '", member, "'"));
    }
    parsed.note = member.substr(space + 1);
    members.push_back(parsed);
  }
  std::sort(members.begin(), members.end(),
            [](const GroupMember& a, const GroupMember& b) { return a.id < b.id; });
  return members;
}

}  // namespace rdmaflow::strategies::moshpit
