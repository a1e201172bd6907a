// File: progress_engine.cc
#include "runtime/progress_engine.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::runtime {

ProgressEngine::ProgressEngine(rdma::Transport& transport, rdma::Store& store,
                               const CommunicatorOptions& options,
                               int world_size)
    : transport_(transport),
      store_(store),
      options_(options),
      world_size_(world_size),
      endpoints_(world_size),
      probe_busy_(world_size, false),
      next_probe_(world_size, absl::InfinitePast()) {}

ProgressEngine::~ProgressEngine() {
  for (auto& endpoint : endpoints_) {
    if (endpoint != nullptr) endpoint->Close().IgnoreError();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (outstanding_ > 0 && absl::Now() < deadline) {
    if (!transport_.Progress().ok()) break;
  }
  endpoints_.clear();
}

absl::Status ProgressEngine::Connect(const std::vector<int>& peers) {
  peers_ = peers;
  RETURN_IF_ERROR(rdma::PublishAddress(store_, options_.ns, transport_));
  for (int peer : peers) {
    ASSIGN_OR_RETURN(endpoints_[peer],
                     rdma::ConnectToPeer(transport_, store_, options_.ns, peer,
                                         options_.timeout));
  }
  return absl::OkStatus();
}

void ProgressEngine::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::Status ProgressEngine::Poll() {
  absl::StatusOr<int> fired = transport_.Progress();
  if (!fired.ok()) Fail(fired.status());
  while (std::optional<rdma::Notification> n = transport_.PollNotification()) {
    if (handlers_.on_notification) handlers_.on_notification(*n);
  }
  if (handlers_.on_round) handlers_.on_round();
  return failure_;
}

void ProgressEngine::ProbePeer(int peer) {
  const absl::Time now = absl::Now();
  if (endpoints_[peer] == nullptr || probe_busy_[peer] ||
      now < next_probe_[peer]) {
    return;
  }
  next_probe_[peer] = now + options_.liveness_interval;
  absl::Status posted =
      endpoints_[peer]->PostFlush([this, peer](absl::Status status) {
        Completed();
        probe_busy_[peer] = false;
        if (!status.ok() && !absl::IsCancelled(status)) Fail(status);
      });
  if (absl::IsResourceExhausted(posted)) return;
  if (!posted.ok()) {
    Fail(posted);
    return;
  }
  Started();
  probe_busy_[peer] = true;
}

absl::Status ProgressEngine::WaitUntil(
    const std::function<bool()>& ready, int peer,
    const std::function<std::string()>& what) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    if (absl::Status polled = Poll(); !polled.ok()) {
      // Say what we were waiting for: the tensor and the peer.
      return absl::Status(polled.code(),
                          absl::StrCat(polled.message(), " (rank ", rank(),
                                       " was waiting: ", what(), ")"));
    }
    if (ready()) return absl::OkStatus();
    if (peer >= 0) {
      ProbePeer(peer);
    } else {
      for (int p : peers_) ProbePeer(p);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank(), " timed out after ",
                       absl::FormatDuration(options_.timeout), ": ", what()));
    }
    // Other processes may share our cores (2-core CI machines).
    std::this_thread::yield();
  }
}

absl::Status ProgressEngine::Post(const std::function<absl::Status()>& post,
                                  int peer,
                                  const std::function<std::string()>& what) {
  absl::Status posted = post();
  if (absl::IsResourceExhausted(posted)) {
    RETURN_IF_ERROR(WaitUntil(
        [&] {
          posted = post();
          return !absl::IsResourceExhausted(posted);
        },
        peer, what));
  }
  if (posted.ok()) Started();
  return posted;
}

absl::Status ProgressEngine::Drain(const std::function<bool()>& idle,
                                   const std::function<std::string()>& what) {
  // Make every write visible at its target too, not only complete locally.
  for (int peer : peers_) {
    if (endpoints_[peer] == nullptr) continue;  // never connected
    RETURN_IF_ERROR(Post(
        [&] {
          return endpoints_[peer]->PostFlush([this](absl::Status status) {
            Completed();
            if (!status.ok()) Fail(status);
          });
        },
        peer, [&] { return absl::StrCat("flushing the link to rank ", peer); }));
  }
  return WaitUntil([&] { return outstanding_ == 0 && idle(); }, -1, [&] {
    return outstanding_ > 0
               ? absl::StrCat(outstanding_,
                              " operations still in flight while draining")
               : what();
  });
}

absl::Status ProgressEngine::Barrier(const std::string& name) {
  return rdma::Barrier(store_, options_.ns, name, world_size_,
                       options_.timeout, &transport_);
}

}  // namespace rdmaflow::runtime
