// File: sync_policy.cc
#include "strategies/ps/sync_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::strategies::ps {
namespace {

absl::Status SyntaxError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "bad sync mode '", text, "' (", why,
      "): use bsp, asp, ssp:S (S >= 0) or dssp:LOW:HIGH (0 <= LOW <= HIGH)"));
}

}  // namespace

absl::StatusOr<SyncPolicy> SyncPolicy::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  SyncPolicy policy;
  const absl::string_view mode = parts[0];
  size_t want = 1;
  if (mode == "bsp") {
    policy.mode = SyncMode::kBsp;
  } else if (mode == "asp") {
    policy.mode = SyncMode::kAsp;
  } else if (mode == "ssp") {
    policy.mode = SyncMode::kSsp;
    want = 2;
  } else if (mode == "dssp") {
    policy.mode = SyncMode::kDssp;
    want = 3;
  } else {
    return SyntaxError(text, "unknown mode");
  }
  if (parts.size() != want) return SyntaxError(text, "wrong number of bounds");
  if (want >= 2 && (!absl::SimpleAtoi(parts[1], &policy.staleness) ||
                    policy.staleness < 0)) {
    return SyntaxError(text, "the staleness bound is not a count");
  }
  if (want == 3 && (!absl::SimpleAtoi(parts[2], &policy.staleness_high) ||
                    policy.staleness_high < policy.staleness)) {
    return SyntaxError(text, "HIGH must be a count no smaller than LOW");
  }
  return policy;
}

std::string SyncPolicy::ToString() const {
  switch (mode) {
    case SyncMode::kBsp:
      return "bsp";
    case SyncMode::kAsp:
      return "asp";
    case SyncMode::kSsp:
      return absl::StrCat("ssp:", staleness);
    case SyncMode::kDssp:
      return absl::StrCat("dssp:", staleness, ":", staleness_high);
  }
  return "?";
}

absl::StatusOr<bool> SlicePermitted(const std::vector<int64_t>& held, int me, int64_t clock,
                                    SyncMode mode, int64_t bound) {
  if (me < 0 || static_cast<size_t>(me) >= held.size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", me, " of a row of ", held.size()));
  }
  if (held[me] > clock) {
    return absl::DataLossError(absl::StrCat(
        "the server says it holds ", held[me], " of the worker's gradients at its clock ", clock,
        ", more than the worker pushed"));
  }
  if (held[me] < clock) return false;  // read-my-writes
  if (mode == SyncMode::kBsp) return *std::min_element(held.begin(), held.end()) >= clock;
  return clock <= bound;
}

int DsspExtraIterations(const PushTiming& fastest, const PushTiming& slowest,
                        double now, int range) {
  if (range <= 0 || fastest.interval <= 0 || slowest.interval <= 0) return 0;
  double next = slowest.last + slowest.interval;
  if (next < now) {
    next += std::ceil((now - next) / slowest.interval) * slowest.interval;
  }
  int best = 0;
  double best_distance = std::abs(fastest.last - next);
  for (int r = 1; r <= range; ++r) {
    const double distance = std::abs(fastest.last + r * fastest.interval - next);
    if (distance < best_distance) {
      best = r;
      best_distance = distance;
    }
  }
  return best;
}

ClockTable::ClockTable(const SyncPolicy& policy, int workers)
    : policy_(policy),
      clocks_(workers, 0),
      timing_(workers),
      grant_(workers, -1),
      held_(workers, false),
      released_(workers, -std::numeric_limits<double>::infinity()) {}

int64_t ClockTable::min_clock() const {
  return *std::min_element(clocks_.begin(), clocks_.end());
}

void ClockTable::OnPush(int w, double now) {
  PushTiming& timing = timing_[w];
  if (clocks_[w] > 0) {
    // From when it could start: a held worker's wait is not its pace.
    timing.interval = now - std::max(timing.last, released_[w]);
  }
  timing.last = now;
  const int64_t min_before = min_clock();
  ++clocks_[w];
  if (policy_.mode == SyncMode::kDssp && clocks_[w] == min_clock() + policy_.staleness + 1 &&
      grant_[w] < clocks_[w]) {
    // `w` just reached the lower bound's edge, with no grant left: it is
    // (one of) the fastest. The slowest is the lowest clock, the one that
    // pushed longest ago among equals.
    int slowest = 0;
    for (int v = 1; v < workers(); ++v) {
      if (clocks_[v] < clocks_[slowest] ||
          (clocks_[v] == clocks_[slowest] && timing_[v].last < timing_[slowest].last)) {
        slowest = v;
      }
    }
    const int r = DsspExtraIterations(timing, timing_[slowest], now,
                                      policy_.staleness_high - policy_.staleness);
    grant_[w] = clocks_[w] - 1 + r;
  }
  if (min_clock() != min_before) {
    // The bounds rose: whoever waited and may now start was released now.
    for (int v = 0; v < workers(); ++v) {
      if (v != w && held_[v] && clocks_[v] <= Bound(v)) {
        held_[v] = false;
        released_[v] = now;
      }
    }
  }
  held_[w] = clocks_[w] > Bound(w);
}

int64_t ClockTable::Bound(int w) const {
  switch (policy_.mode) {
    case SyncMode::kAsp:
      return kUnbounded;
    case SyncMode::kBsp:
    case SyncMode::kSsp:
      return min_clock() + policy_.staleness;
    case SyncMode::kDssp:
      return std::max(min_clock() + policy_.staleness, grant_[w]);
  }
  return 0;
}

int ClockTable::extra(int w) const {
  if (policy_.mode != SyncMode::kDssp) return 0;
  return static_cast<int>(Bound(w) - (min_clock() + policy_.staleness));
}

}  // namespace rdmaflow::strategies::ps
