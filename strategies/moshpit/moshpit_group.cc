// File: moshpit_group.cc
#include "strategies/moshpit/moshpit_group.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies::moshpit {

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
  // Poll with Adds of 0 (they answer at once) until the group is sealed,
  // backing off to a poll per millisecond: the store's server shares the
  // cores with the training ranks.
  absl::Duration backoff = absl::Microseconds(20);
  while (true) {
    ASSIGN_OR_RETURN(int64_t sealing, store.Add(prefix + "/seal", 0));
    if (sealing > 0) break;
    ASSIGN_OR_RETURN(int64_t taken, store.Add(prefix + "/count", 0));
    if (taken >= expected || absl::Now() >= deadline) {
      ASSIGN_OR_RETURN(int64_t first, store.Add(prefix + "/seal", 1));
      if (first == 1) {
        ASSIGN_OR_RETURN(taken, store.Add(prefix + "/count", 0));
        RETURN_IF_ERROR(store.Set(prefix + "/final", absl::StrCat(taken)));
      }
      break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(1));
  }
  // The sealer writes /final right after winning the seal.
  ASSIGN_OR_RETURN(std::string text, store.Get(prefix + "/final", absl::Seconds(60)));
  int64_t final_count = 0;
  if (!absl::SimpleAtoi(text, &final_count)) {
    return absl::InternalError(absl::StrCat("moshpit group ", prefix, ": final '", text, "'"));
  }
  if (ticket > final_count) {
    return std::vector<GroupMember>{{id, note}};  // too late: alone
  }
  std::vector<GroupMember> members;
  for (int64_t i = 1; i <= final_count; ++i) {
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
