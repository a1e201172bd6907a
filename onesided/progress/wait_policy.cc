// File: wait_policy.cc
#include "onesided/progress/wait_policy.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::onesided {
namespace {

// Beyond this a "bounded wake-up" is no longer one: a collective step would
// wait seconds for a peer that answered at once.
constexpr absl::Duration kLongestSleep = absl::Seconds(1);

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

IdleBackoff::Clock IdleBackoff::RealClock() {
  return {[] { return absl::Now(); }, [](absl::Duration d) { absl::SleepFor(d); },
          [] { std::this_thread::yield(); }};
}

WaitPolicy WaitPolicy::Spin() {
  WaitPolicy policy;
  policy.spin_rounds = INT64_MAX;
  return policy;
}

WaitPolicy WaitPolicy::Yield() {
  WaitPolicy policy;
  policy.spin_rounds = 200;
  policy.yield_for = absl::InfiniteDuration();
  return policy;
}

WaitPolicy WaitPolicy::Adaptive() { return WaitPolicy(); }

WaitPolicy WaitPolicy::ForAnnouncedActivity() const {
  if (!follow_announced || spin_rounds == INT64_MAX || yield_for == absl::InfiniteDuration()) {
    return *this;
  }
  WaitPolicy policy = *this;
  policy.spin_rounds = 0;
  policy.yield_for = absl::ZeroDuration();
  policy.max_sleep = std::max(max_sleep, kAnnouncedMaxSleep);
  policy.sleep_on_events = true;
  return policy;
}

absl::Status WaitPolicy::Validate() const {
  if (spin_rounds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait policy: spin_rounds must be >= 0, not ", spin_rounds));
  }
  if (yield_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait policy: yield_for must be >= 0, not ", absl::FormatDuration(yield_for)));
  }
  if (min_sleep <= absl::ZeroDuration() || max_sleep > kLongestSleep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait policy: sleeps must lie in (0, ", absl::FormatDuration(kLongestSleep),
        "], not ", absl::FormatDuration(min_sleep), " to ", absl::FormatDuration(max_sleep)));
  }
  if (min_sleep > max_sleep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait policy: min_sleep (", absl::FormatDuration(min_sleep),
        ") is longer than max_sleep (", absl::FormatDuration(max_sleep), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WaitPolicy> WaitPolicy::Parse(absl::string_view text) {
  const std::pair<absl::string_view, absl::string_view> kind_and_fields =
      absl::StrSplit(text, absl::MaxSplits(':', 1));
  WaitPolicy policy;
  if (kind_and_fields.first == "spin") {
    policy = Spin();
  } else if (kind_and_fields.first == "yield") {
    policy = Yield();
  } else if (kind_and_fields.first != "adaptive") {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait policy '", text, "': the kind must be spin, yield or adaptive"));
  }
  if (!kind_and_fields.second.empty()) {
    if (kind_and_fields.first != "adaptive") {
      return absl::InvalidArgumentError(
          absl::StrCat("wait policy '", text, "': only adaptive takes fields"));
    }
    for (absl::string_view field : absl::StrSplit(kind_and_fields.second, ',')) {
      const std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(field, absl::MaxSplits('=', 1));
      int64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "wait policy '", text, "': '", field, "' needs a non-negative integer"));
      }
      if (kv.first == "spin") {
        policy.spin_rounds = value;
      } else if (kv.first == "yield_us") {
        policy.yield_for = absl::Microseconds(value);
      } else if (kv.first == "sleep_us") {
        policy.max_sleep = absl::Microseconds(value);
        policy.min_sleep = std::min(policy.min_sleep, policy.max_sleep);
      } else if (kv.first == "events") {
        if (value > 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("wait policy '", text, "': events is 0 or 1"));
        }
        policy.sleep_on_events = value == 1;
      } else if (kv.first == "announced") {
        if (value > 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("wait policy '", text, "': announced is 0 or 1"));
        }
        policy.follow_announced = value == 1;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "wait policy '", text, "': unknown field '", kv.first,
            "' (known: spin, yield_us, sleep_us, events, announced)"));
      }
    }
  }
  if (absl::Status valid = policy.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': ", valid.message()));
  }
  return policy;
}

std::string WaitPolicy::ToString() const {
  if (spin_rounds == INT64_MAX) return "spin";
  const WaitPolicy yield = Yield();
  if (yield_for == absl::InfiniteDuration() && spin_rounds == yield.spin_rounds) {
    return "yield";
  }
  return absl::StrCat("adaptive:spin=", spin_rounds, ",yield_us=", Micros(yield_for),
                      ",sleep_us=", Micros(max_sleep), sleep_on_events ? ",events=1" : "",
                      follow_announced ? "" : ",announced=0");
}

IdleBackoff::IdleBackoff(const WaitPolicy& policy) : IdleBackoff(policy, RealClock()) {}

IdleBackoff::IdleBackoff(const WaitPolicy& policy, Clock clock)
    : policy_(policy), clock_(std::move(clock)), next_sleep_(policy.min_sleep) {}

void IdleBackoff::Reset() {
  phase_ = Phase::kSpin;
  idle_rounds_ = 0;
  next_sleep_ = policy_.min_sleep;
}

void IdleBackoff::Idle(absl::Duration at_most) {
  switch (phase_) {
    case Phase::kSpin:
      if (++idle_rounds_ <= policy_.spin_rounds) return;
      phase_ = Phase::kYield;
      yield_until_ = clock_.now() + policy_.yield_for;
      [[fallthrough]];
    case Phase::kYield:
      if (policy_.yield_for == absl::InfiniteDuration() || clock_.now() < yield_until_) {
        ++yields_;
        clock_.yield();
        return;
      }
      phase_ = Phase::kSleep;
      [[fallthrough]];
    case Phase::kSleep:
      ++sleeps_;
      clock_.sleep(std::max(absl::ZeroDuration(), std::min(next_sleep_, at_most)));
      next_sleep_ = std::min(next_sleep_ * 2, policy_.max_sleep);
      return;
  }
}

}  // namespace rdmaflow::onesided
