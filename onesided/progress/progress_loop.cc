// File: progress_loop.cc
#include "onesided/progress/progress_loop.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rdmaflow::onesided {

// A watched peer. Its probes' completions hold it, so they may outlive the
// watch (and the loop): they then only update this.
struct ProgressLoop::Watch {
  int64_t id = 0;
  int peer = -1;
  rdma::Endpoint* endpoint = nullptr;
  PeerFailed on_failure;
  bool active = true;
  bool probing = false;
  absl::Time next_probe = absl::InfinitePast();
};

absl::Status ProgressLoopOptions::Validate() const {
  if (liveness_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": liveness_interval must be positive, not ",
                     absl::FormatDuration(liveness_interval)));
  }
  if (absl::Status valid = wait.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", valid.message()));
  }
  return absl::OkStatus();
}

ProgressLoop::ProgressLoop(rdma::Transport& transport, ProgressLoopOptions options)
    : transport_(transport),
      options_(std::move(options)),
      owner_(std::this_thread::get_id()) {
  if (absl::Status valid = options_.Validate(); !valid.ok()) {
    std::fprintf(stderr, "ProgressLoop: invalid options: %s\n", valid.ToString().c_str());
    std::abort();
  }
}

ProgressLoop::~ProgressLoop() {
  for (auto& [peer, watch] : watches_) watch->active = false;
  watches_.clear();
  Drain([&] { return *probes_in_flight_ == 0; }, absl::Now() + absl::Seconds(1))
      .IgnoreError();
}

absl::Status ProgressLoop::Drain(absl::FunctionRef<bool()> done, absl::Time deadline) {
  // Teardown is not latency-bound: never spin for seconds, whatever the
  // loop's own policy.
  IdleBackoff backoff(WaitPolicy::Adaptive());
  while (!done()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::StatusOr<int> fired = transport_.Progress();
    if (!fired.ok()) return fired.status();
    if (*fired > 0) {
      backoff.Reset();
    } else {
      backoff.Idle(deadline - now);
    }
  }
  return absl::OkStatus();
}

absl::Status ProgressLoop::WaitFor(absl::FunctionRef<bool()> done, absl::Time deadline,
                                   absl::string_view what) {
  return WaitUntil(done, deadline, [&] { return std::string(what); });
}

void ProgressLoop::CheckThread(const char* method) const {
  if (OnLoopThread()) return;
  std::ostringstream owner, caller;
  owner << owner_;
  caller << std::this_thread::get_id();
  std::fprintf(stderr,
               "FATAL: ProgressLoop '%s': %s called on thread %s, but the loop belongs to "
               "thread %s (see docs/thread_model.md; AdoptOnCurrentThread() hands it over)\n",
               options_.name.c_str(), method, caller.str().c_str(), owner.str().c_str());
  std::abort();
}

void ProgressLoop::CheckOnLoopThread(const std::string& caller) const {
  CheckThread(caller.c_str());
}

void ProgressLoop::AdoptOnCurrentThread() { owner_ = std::this_thread::get_id(); }

int64_t ProgressLoop::AddNotificationHandler(NotificationHandler handler) {
  CheckThread("AddNotificationHandler");
  const int64_t id = next_handler_id_++;
  handlers_[id].on_notification = std::move(handler);
  ++notification_handlers_;
  return id;
}

int64_t ProgressLoop::AddRoundHandler(RoundHandler handler) {
  CheckThread("AddRoundHandler");
  const int64_t id = next_handler_id_++;
  handlers_[id].on_round = std::move(handler);
  return id;
}

void ProgressLoop::RemoveHandler(int64_t id) {
  CheckThread("RemoveHandler");
  auto it = handlers_.find(id);
  if (it == handlers_.end()) return;
  if (it->second.on_notification && !it->second.removed) --notification_handlers_;
  if (dispatching_) {
    it->second.removed = true;  // erased by Sweep() after the round
  } else {
    handlers_.erase(it);
  }
}

void ProgressLoop::Sweep() {
  for (auto it = handlers_.begin(); it != handlers_.end();) {
    it = it->second.removed ? handlers_.erase(it) : std::next(it);
  }
}

int64_t ProgressLoop::WatchPeer(int peer, rdma::Endpoint* endpoint, PeerFailed on_failure) {
  CheckThread("WatchPeer");
  auto watch = std::make_shared<Watch>();
  watch->id = next_watch_id_++;
  watch->peer = peer;
  watch->endpoint = endpoint;
  watch->on_failure = std::move(on_failure);
  watch->next_probe = absl::Now() + options_.liveness_interval;
  watches_.emplace(peer, watch);
  return watch->id;
}

void ProgressLoop::Unwatch(int64_t id) {
  CheckThread("Unwatch");
  for (auto it = watches_.begin(); it != watches_.end(); ++it) {
    if (it->second->id != id) continue;
    it->second->active = false;
    watches_.erase(it);
    return;
  }
}

void ProgressLoop::Rearm(int64_t id) {
  CheckThread("Rearm");
  for (auto& [peer, watch] : watches_) {
    if (watch->id != id) continue;
    watch->next_probe = absl::Now() + options_.liveness_interval;
    return;
  }
}

void ProgressLoop::Fail(absl::Status status) {
  // Unchecked: completions fire it from whatever thread tears their owner down.
  if (failure_.ok() && !status.ok()) failure_ = std::move(status);
}

void ProgressLoop::Probe(const std::shared_ptr<Watch>& held, absl::Time now) {
  Watch& watch = *held;
  if (!watch.active || watch.probing || watch.endpoint == nullptr || now < watch.next_probe) {
    return;
  }
  watch.next_probe = now + options_.liveness_interval;
  absl::Status posted = watch.endpoint->PostFlush(
      [this, held, in_flight = probes_in_flight_](absl::Status status) {
        --*in_flight;
        held->probing = false;
        if (!held->active || status.ok() || absl::IsCancelled(status)) return;
        // Active implies the loop is alive: it deactivates every watch first.
        if (held->on_failure) {
          held->on_failure(held->peer, status);
        } else {
          Fail(status);
        }
      });
  if (absl::IsResourceExhausted(posted)) return;  // a full queue: next round
  if (!posted.ok()) {
    if (watch.on_failure) {
      watch.on_failure(watch.peer, posted);
    } else {
      Fail(posted);
    }
    return;
  }
  ++*probes_in_flight_;
  ++probes_posted_;
  watch.probing = true;
}

void ProgressLoop::ProbeIfDue(absl::Span<const int> peers) {
  CheckThread("ProbeIfDue");
  const absl::Time now = absl::Now();
  // A failure callback may unwatch: probe from a snapshot.
  std::vector<std::shared_ptr<Watch>> due;
  if (peers.empty()) {
    for (auto& [peer, watch] : watches_) due.push_back(watch);
  } else {
    for (int peer : peers) {
      auto [begin, end] = watches_.equal_range(peer);
      for (auto it = begin; it != end; ++it) due.push_back(it->second);
    }
  }
  for (const auto& watch : due) Probe(watch, now);
}

absl::StatusOr<int> ProgressLoop::Poll() {
  CheckThread("Poll");
  ++rounds_;
  int moved = 0;
  absl::StatusOr<int> fired = transport_.Progress();
  if (fired.ok()) {
    moved += *fired;
  } else {
    Fail(fired.status());
  }
  dispatching_ = true;
  // A loop nobody asked for notifications leaves them in the transport: a
  // protocol on another loop of the same transport (a bug, but one that
  // must not lose data) still finds them.
  while (notification_handlers_ > 0) {
    std::optional<rdma::Notification> n = transport_.PollNotification();
    if (!n.has_value()) break;
    ++moved;
    bool claimed = false;
    for (auto& [id, handler] : handlers_) {
      if (handler.removed || !handler.on_notification) continue;
      if (handler.on_notification(*n)) {
        claimed = true;
        break;
      }
    }
    if (!claimed) ++unclaimed_notifications_;
  }
  for (auto& [id, handler] : handlers_) {
    if (handler.removed || !handler.on_round) continue;
    if (handler.on_round()) ++moved;
  }
  dispatching_ = false;
  Sweep();
  if (!failure_.ok()) return failure_;
  return moved;
}

absl::Status ProgressLoop::WaitUntil(absl::FunctionRef<bool()> ready, absl::Time deadline,
                                     absl::FunctionRef<std::string()> what,
                                     absl::Span<const int> probe) {
  return WaitUntil(ready, deadline, what, probe, options_.wait);
}

absl::Status ProgressLoop::WaitUntil(absl::FunctionRef<bool()> ready, absl::Time deadline,
                                     absl::FunctionRef<std::string()> what,
                                     absl::Span<const int> probe, const WaitPolicy& policy) {
  CheckThread("WaitUntil");
  const absl::Time start = absl::Now();
  IdleBackoff backoff = Backoff(policy);
  while (true) {
    absl::StatusOr<int> moved = Poll();
    if (!moved.ok()) {
      return absl::Status(moved.status().code(),
                          absl::StrCat(moved.status().message(), " (", options_.name,
                                       " was waiting for ", what(), ")"));
    }
    if (ready()) return absl::OkStatus();
    if (!probe.empty()) ProbeIfDue(probe);
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.name, " timed out after ", absl::FormatDuration(now - start),
                       " waiting for ", what()));
    }
    if (*moved > 0) {
      backoff.Reset();
    } else {
      backoff.Idle(deadline - now);  // never sleeps past the deadline
    }
  }
}

IdleBackoff ProgressLoop::Backoff(const WaitPolicy& given) {
  const WaitPolicy policy =
      transport_.AnnouncesActivity() ? given.ForAnnouncedActivity() : given;
  IdleBackoff::Clock clock = IdleBackoff::RealClock();
  if (policy.sleep_on_events) {
    clock.sleep = [this](absl::Duration d) { transport_.WaitForActivity(d); };
  }
  return IdleBackoff(policy, std::move(clock));
}

absl::Status ProgressLoop::WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                                           absl::FunctionRef<bool()> done, absl::Duration stall,
                                           absl::FunctionRef<std::string()> what,
                                           absl::Span<const int> probe) {
  return WaitForProgressWith(turn, done, stall, what, probe, options_.wait, nullptr);
}

absl::Status ProgressLoop::WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                                           absl::FunctionRef<bool()> done, absl::Duration stall,
                                           absl::FunctionRef<std::string()> what,
                                           absl::Span<const int> probe,
                                           const WaitPolicy& policy) {
  return WaitForProgressWith(turn, done, stall, what, probe, policy, nullptr);
}

absl::Status ProgressLoop::WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                                           absl::FunctionRef<bool()> done, absl::Duration stall,
                                           absl::FunctionRef<std::string()> what,
                                           absl::Span<const int> probe,
                                           absl::FunctionRef<void(absl::Duration limit)> idle) {
  return WaitForProgressWith(turn, done, stall, what, probe, options_.wait, &idle);
}

absl::Status ProgressLoop::WaitForProgressWith(
    absl::FunctionRef<absl::Status(bool& moved)> turn, absl::FunctionRef<bool()> done,
    absl::Duration stall, absl::FunctionRef<std::string()> what, absl::Span<const int> probe,
    const WaitPolicy& policy, const absl::FunctionRef<void(absl::Duration)>* idle) {
  CheckThread("WaitForProgress");
  IdleBackoff backoff = Backoff(policy);
  absl::Time last_move = absl::Now();
  while (true) {
    bool moved = false;
    if (absl::Status turned = turn(moved); !turned.ok()) return turned;
    if (done()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (moved) {
      last_move = now;
      backoff.Reset();
      continue;
    }
    const absl::Duration quiet = now - last_move;
    if (quiet > stall) {
      return absl::DeadlineExceededError(absl::StrCat(options_.name,
                                                      " timed out: no progress for ",
                                                      absl::FormatDuration(stall),
                                                      " waiting for ", what()));
    }
    if (!probe.empty()) ProbeIfDue(probe);  // a silent peer, each liveness interval
    if (idle != nullptr) {
      (*idle)(stall - quiet);
    } else {
      backoff.Idle(stall - quiet);  // peers may share cores with us
    }
  }
}

}  // namespace rdmaflow::onesided
