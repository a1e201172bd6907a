// File: moshpit_group.cc
#include "strategies/moshpit/moshpit_group.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies::moshpit {
namespace {

// More tickets than any group can take (a group is one grid line).
constexpr int64_t kMaxGroupTickets = 1 << 20;

// How long past the group's deadline a ticket's record, and then the seal,
// are still waited for: a live peer writes its record one store round trip
// after taking its ticket, and the sealer writes the seal right after
// reading the records.
constexpr absl::Duration kGrace = absl::Seconds(2);

// What is left until `until`, at least a millisecond: a store wait of 0
// may mean "forever" to a store.
absl::Duration Left(absl::Time until) {
  return std::max(until - absl::Now(), absl::Milliseconds(1));
}

absl::Status BadSeal(const std::string& prefix, const std::string& what) {
  return absl::DataLossError(absl::StrCat("moshpit group ", prefix, ": ", what,
                                          "; a peer wrote a bad seal into the store"));
}

// "<id> <note>" (a member record), with the id in 0..world-1.
absl::StatusOr<GroupMember> ParseMember(absl::string_view text, int world) {
  const size_t space = text.find(' ');
  GroupMember member;
  if (space == absl::string_view::npos ||
      !absl::SimpleAtoi(text.substr(0, space), &member.id) || member.id < 0 ||
      member.id >= world) {
    return absl::DataLossError(absl::StrCat("member record '", text.substr(0, 64),
                                            "' is not '<id below ", world, "> <note>'"));
  }
  member.note = std::string(text.substr(space + 1));
  if (member.note.find_first_of(" \n") != std::string::npos) {
    return absl::DataLossError("a member's note holds a space or a line break");
  }
  return member;
}

struct Sealed {
  bool listed = false;  // this peer's ticket is in the seal
  std::vector<GroupMember> members;
};

// Checks the seal `text` (written by a peer) against what this peer knows:
// `taken` tickets had been taken when it looked, after the seal was written.
absl::StatusOr<Sealed> ParseSeal(const std::string& prefix, const std::string& text,
                                 int64_t taken, int world, int64_t ticket, int id,
                                 const std::string& note) {
  Sealed sealed;
  std::set<int> ids;
  int64_t previous = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    int64_t t = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, space), &t)) {
      return BadSeal(prefix, absl::StrCat("the line '", line.substr(0, 64),
                                          "' does not start with a ticket"));
    }
    if (t <= previous || t > taken) {
      return BadSeal(prefix, absl::StrCat("ticket ", t, t <= previous ? " is not above " : "",
                                          t <= previous ? absl::StrCat(previous) : "",
                                          t > taken ? absl::StrCat(" is beyond the ", taken,
                                                                   " tickets taken")
                                                    : ""));
    }
    previous = t;
    absl::StatusOr<GroupMember> member = ParseMember(line.substr(space + 1), world);
    if (!member.ok()) return BadSeal(prefix, std::string(member.status().message()));
    if (!ids.insert(member->id).second) {
      return BadSeal(prefix, absl::StrCat("id ", member->id, " is listed twice"));
    }
    if (t == ticket) {
      if (member->id != id || member->note != note) {
        return BadSeal(prefix, absl::StrCat("this peer's ticket ", ticket, " is listed as '",
                                            line.substr(0, 64), "'"));
      }
      sealed.listed = true;
    }
    sealed.members.push_back(*std::move(member));
  }
  std::sort(sealed.members.begin(), sealed.members.end(),
            [](const GroupMember& a, const GroupMember& b) { return a.id < b.id; });
  return sealed;
}

}  // namespace

absl::StatusOr<std::vector<GroupMember>> FormGroup(rdma::Store& store,
                                                   const std::string& prefix, int id,
                                                   const std::string& note, int expected,
                                                   int world, absl::Duration timeout) {
  if (note.find_first_of(" \n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moshpit group ", prefix, ": a note may not hold spaces or line breaks: '", note, "'"));
  }
  if (id < 0 || id >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("moshpit group ", prefix, ": id ", id, " is outside 0..", world - 1));
  }
  const std::vector<GroupMember> alone = {{id, note}};
  ASSIGN_OR_RETURN(int64_t ticket, store.Add(prefix + "/count", 1));
  if (ticket < 1 || ticket > kMaxGroupTickets) {
    return BadSeal(prefix, absl::StrCat("ticket ", ticket, " is outside 1..", kMaxGroupTickets));
  }
  RETURN_IF_ERROR(
      store.Set(absl::StrCat(prefix, "/member/", ticket), absl::StrCat(id, " ", note)));
  const absl::Time deadline = absl::Now() + timeout;

  // The sealer: the records of the tickets taken now, each waited for at
  // most kGrace from the start of sealing (a holder that died before
  // writing its record is left out, as is a record that does not parse or
  // repeats an id), into the seal. The seal counts only if it closes the
  // group before a waiter gave up on it (the first Add on <prefix>/closed);
  // else it is empty and everyone is alone this round, so no two members
  // ever hold different lists.
  int64_t taken = 0;  // tickets taken when this peer last looked
  auto seal = [&]() -> absl::StatusOr<std::string> {
    const absl::Time records_until = absl::Now() + kGrace;
    ASSIGN_OR_RETURN(taken, store.Add(prefix + "/count", 0));
    // A peer takes one ticket a round (a restarted one may take a second):
    // more than twice the world is a forged count, refused before it sizes
    // the reads below.
    if (taken < ticket || taken > std::min<int64_t>(kMaxGroupTickets, 2 * int64_t{world})) {
      return BadSeal(prefix, absl::StrCat(taken, " tickets taken, outside ", ticket, "..",
                                          2 * int64_t{world}));
    }
    std::string text;
    std::set<int> ids = {id};
    for (int64_t i = 1; i <= taken; ++i) {
      if (i == ticket) {
        absl::StrAppend(&text, i, " ", id, " ", note, "\n");
        continue;
      }
      absl::StatusOr<std::string> record =
          store.Get(absl::StrCat(prefix, "/member/", i), Left(records_until));
      if (absl::IsDeadlineExceeded(record.status())) {
        std::fprintf(stderr,
                     "moshpit group %s: ticket %lld was taken but its holder wrote no record "
                     "in time (it died?); the group goes on without it\n",
                     prefix.c_str(), static_cast<long long>(i));
        continue;
      }
      if (!record.ok()) return record.status();
      absl::StatusOr<GroupMember> member = ParseMember(*record, world);
      if (!member.ok() || !ids.insert(member->id).second) {
        std::fprintf(stderr, "moshpit group %s: ticket %lld's record is left out: %s\n",
                     prefix.c_str(), static_cast<long long>(i),
                     member.ok() ? absl::StrCat("id ", member->id, " is listed already").c_str()
                                 : std::string(member.status().message()).c_str());
        continue;
      }
      absl::StrAppend(&text, i, " ", member->id, " ", member->note, "\n");
    }
    ASSIGN_OR_RETURN(int64_t closed, store.Add(prefix + "/closed", 1));
    if (closed != 1) {
      std::fprintf(stderr,
                   "moshpit group %s: a member gave up waiting for the seal; everyone is "
                   "alone this round\n",
                   prefix.c_str());
      text.clear();
    }
    RETURN_IF_ERROR(store.Set(prefix + "/final", text));
    return text;
  };

  // The holder of the last expected ticket seals at once; the others poll
  // with Adds of 0 (they answer at once) until the group is sealed, backing
  // off to a poll per millisecond: the store's server shares the cores with
  // the training ranks. Every store call is a round trip on each round's
  // critical path: nobody reads back what it wrote.
  std::optional<std::string> text;  // the seal, known here only to the sealer
  bool sealing = ticket >= expected;
  absl::Duration backoff = absl::Microseconds(20);
  while (!sealing) {
    ASSIGN_OR_RETURN(int64_t sealed, store.Add(prefix + "/seal", 0));
    if (sealed > 0) break;
    ASSIGN_OR_RETURN(int64_t taken, store.Add(prefix + "/count", 0));
    if (taken >= expected || absl::Now() >= deadline) {
      sealing = true;
      break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(1));
  }
  if (sealing) {
    ASSIGN_OR_RETURN(int64_t first, store.Add(prefix + "/seal", 1));
    if (first == 1) {
      ASSIGN_OR_RETURN(text, seal());
    }
  }
  if (!text.has_value()) {
    // Sealing began before now: the sealer writes the seal within kGrace
    // (its record reads) and a few store calls. Twice that, then give up
    // by closing the group, unless the sealer closed it first.
    const absl::Time seal_seen = absl::Now();
    absl::StatusOr<std::string> read =
        store.Get(prefix + "/final", Left(seal_seen + 2 * kGrace));
    if (absl::IsDeadlineExceeded(read.status())) {
      ASSIGN_OR_RETURN(int64_t closed, store.Add(prefix + "/closed", 1));
      if (closed == 1) {
        std::fprintf(stderr,
                     "moshpit group %s: no seal was written in time (the sealer died?); "
                     "alone this round\n",
                     prefix.c_str());
        return alone;  // the sealer, if alive, will seal everyone alone
      }
      read = store.Get(prefix + "/final", kGrace);  // the sealer closed it first
      if (absl::IsDeadlineExceeded(read.status())) return alone;  // and then died
    }
    if (!read.ok()) return read.status();
    text = *std::move(read);
    // Looked at after the seal was written: no seal lists more.
    ASSIGN_OR_RETURN(taken, store.Add(prefix + "/count", 0));
  }
  ASSIGN_OR_RETURN(Sealed sealed, ParseSeal(prefix, *text, taken, world, ticket, id, note));
  if (!sealed.listed) return alone;  // too late: alone
  return sealed.members;
}

}  // namespace rdmaflow::strategies::moshpit
