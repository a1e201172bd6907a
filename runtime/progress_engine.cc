// File: progress_engine.cc
#include "runtime/progress_engine.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "onesided/progress/waits.h"

namespace rdmaflow::runtime {
namespace {

onesided::ProgressLoopOptions LoopOptions(const rdma::Transport& transport,
                                          const CommunicatorOptions& options) {
  onesided::ProgressLoopOptions loop;
  loop.name = absl::StrCat("rank ", transport.rank());
  loop.wait = options.wait;
  loop.liveness_interval = options.liveness_interval;
  return loop;
}

}  // namespace

ProgressEngine::ProgressEngine(rdma::Transport& transport, rdma::Store& store,
                               const CommunicatorOptions& options,
                               int world_size)
    : transport_(transport),
      store_(store),
      options_(options),
      world_size_(world_size),
      endpoints_(world_size, nullptr),
      in_flight_(world_size, 0),
      own_loop_(options.links == nullptr && options.loop == nullptr
                    ? std::make_unique<onesided::ProgressLoop>(transport,
                                                               LoopOptions(transport, options))
                    : nullptr),
      loop_(options.links != nullptr  ? &options.links->loop()
            : options.loop != nullptr ? options.loop
                                      : own_loop_.get()) {}

ProgressEngine::~ProgressEngine() { Close(); }

void ProgressEngine::Close() {
  if (closed_) return;
  closed_ = true;
  if (own_loop_ == nullptr) {
    // A shared loop goes on: leave it (an own loop goes with us).
    loop_->CheckOnLoopThread("a communicator's progress engine's destructor");
    for (int64_t handler : handlers_) loop_->RemoveHandler(handler);
  }
  if (links_ == nullptr) return;  // never connected: nothing posted
  for (int64_t subscription : subscriptions_) links_->Unsubscribe(subscription);
  // Only the peers with operations in flight: the others go on serving
  // the protocols that share the links.
  std::vector<int> busy;
  for (int peer : peers_) {
    if (in_flight_[peer] > 0) busy.push_back(peer);
  }
  Fence(busy, [&] { return outstanding_ == 0; }, absl::Now() + absl::Seconds(5),
        absl::StrCat("the communicator of rank ", rank(), " is closing"));
  if (outstanding_ > 0 && own_links_ != nullptr) {
    // A completion that never came may still fire, from the endpoints it
    // was posted on: they stay (and so do the links that own them).
    std::fprintf(stderr,
                 "rdmaflow: the communicator of rank %d leaves its links open: %lld of its "
                 "operations never completed\n",
                 rank(), static_cast<long long>(outstanding_));
    own_links_.release();
  }
  own_links_.reset();
}

void ProgressEngine::set_handlers(Handlers handlers) {
  if (handlers.on_notification) {
    handlers_.push_back(loop_->AddNotificationHandler(
        [on_notification = std::move(handlers.on_notification)](const rdma::Notification& n) {
          on_notification(n);
          return true;
        }));
  }
  if (handlers.on_round) {
    handlers_.push_back(loop_->AddRoundHandler([on_round = std::move(handlers.on_round)] {
      on_round();
      return false;
    }));
  }
}

absl::Status ProgressEngine::Connect(const std::vector<int>& peers) {
  const std::string what = absl::StrCat("the communicator of rank ", rank());
  if (options_.links != nullptr) {
    if (&options_.links->transport() != &transport_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": CommunicatorOptions::links run over another transport"));
    }
    if (options_.loop != nullptr && options_.loop != &options_.links->loop()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": CommunicatorOptions::loop is not the loop of CommunicatorOptions::links"));
    }
    links_ = options_.links;
  } else {
    ASSIGN_OR_RETURN(onesided::OwnLinks own,
                     onesided::MakeOwnLinks(transport_, store_, options_.ns, loop_, {},
                                            options_.timeout, what));
    own_links_ = std::move(own.links);
    links_ = own_links_.get();
  }
  peers_ = peers;
  for (int peer : peers) {
    ASSIGN_OR_RETURN(endpoints_[peer], links_->Lane(peer));
    // A dead peer fails the engine.
    ASSIGN_OR_RETURN(int64_t subscription,
                     links_->Subscribe(peer, [this](int, const absl::Status& status) {
                       Fail(status);
                     }));
    subscriptions_.push_back(subscription);
  }
  return absl::OkStatus();
}

absl::Status ProgressEngine::Poll() {
  // A caller that polls without waiting (a server taking whichever peer's
  // tensor comes first) learns of a dead peer within the liveness bound
  // too: the peers are probed when due, as a wait probes them. Looking
  // every half interval (each watch keeps its own schedule) bounds the
  // delay at one and a half intervals without a scan on every poll.
  const absl::Time now = absl::Now();
  if (now >= next_probe_ && !peers_.empty()) {
    next_probe_ = now + loop_->options().liveness_interval / 2;
    loop_->ProbeIfDue(peers_);
  }
  RETURN_IF_ERROR(loop_->Poll().status());
  return failure_;
}

absl::Status ProgressEngine::WaitUntil(
    const std::function<bool()>& ready, int peer,
    const std::function<std::string()>& what) {
  const int probe[] = {peer};
  RETURN_IF_ERROR(loop_->WaitUntil(
      [&] { return !failure_.ok() || ready(); }, absl::Now() + options_.timeout, what,
      peer >= 0 ? absl::Span<const int>(probe) : absl::Span<const int>(peers_)));
  if (failure_.ok()) return absl::OkStatus();
  return absl::Status(failure_.code(), absl::StrCat(failure_.message(), " (",
                                                    loop_->options().name,
                                                    " was waiting for ", what(), ")"));
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
  if (posted.ok()) Started(peer);
  return posted;
}

absl::Status ProgressEngine::Drain(const std::function<bool()>& idle,
                                   const std::function<std::string()>& what) {
  // Make every write visible at its target too, not only complete locally.
  for (int peer : peers_) {
    if (endpoints_[peer] == nullptr) continue;  // never connected
    RETURN_IF_ERROR(Post(
        [&] {
          return endpoints_[peer]->PostFlush(
              [this, alive = std::weak_ptr<int>(alive_), peer](absl::Status status) {
                if (alive.expired()) return;  // the engine went first (Close())
                Completed(peer);
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

bool ProgressEngine::Fence(absl::Span<const int> peers, absl::FunctionRef<bool()> done,
                           absl::Time deadline, absl::string_view why) {
  if (links_ == nullptr) return done();
  if (own_links_ != nullptr && !done()) {
    // Nobody else uses links of our own: closing them cancels what is
    // still posted at once.
    for (int peer : peers) own_links_->Sever(peer, absl::CancelledError(why));
  }
  return links_->Fence(peers, done, deadline, why);
}

absl::Status ProgressEngine::Barrier(const std::string& name) {
  return onesided::Barrier(*loop_, store_, options_.ns, name, world_size_, options_.timeout);
}

}  // namespace rdmaflow::runtime
