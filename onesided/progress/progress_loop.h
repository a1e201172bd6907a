// File: progress_loop.h
// -----------------------------------------------------------------------------
// ProgressLoop: the one owner of a transport's progress. Every protocol that
// shares a transport (the Messenger and the ring in the c10d backend, the
// executor's links) registers with the transport's loop instead of spinning
// Transport::Progress() on its own. The loop
//
//   - calls Transport::Progress() (completions fire inside it) and hands
//     each notification to the registered notification handlers, in
//     registration order, until one claims it (a loop without notification
//     handlers leaves notifications in the transport);
//   - runs every registered round handler once per round (protocols that
//     poll flags in their memory: slot rings, stamped slots);
//   - waits with a deadline (WaitUntil), escalating from spin to yield to
//     sleep as its WaitPolicy says (wait_policy.h), or, on a transport
//     that announces everything its Progress() could find (UCX over TCP
//     alone), sleeping in the transport's wait at once
//     (WaitPolicy::ForAnnouncedActivity);
//   - probes watched peers for liveness: a flush every `liveness_interval`
//     while a wait involves the peer; a flush that fails (other than
//     cancelled) reports the peer to its watcher.
//
// Thread model (docs/thread_model.md): a loop belongs to one thread, the
// one that created it until AdoptOnCurrentThread() hands it to another.
// Every method but the destructor, Drain(), Fail() and InterruptWait() (any
// thread's, by design) checks that it runs there and aborts the
// process with a message naming the loop and the method otherwise: a call
// from the wrong thread is a bug, never a race. Handlers run on that thread,
// inside Poll(), never under a lock of ours.
//
//   ProgressLoopOptions options;
//   options.name = "rank 0";
//   ProgressLoop loop(transport, options);
//   int64_t watch = loop.WatchPeer(1, endpoint.get(), [&](int peer, absl::Status s) { ... });
//   int64_t id = loop.AddRoundHandler([&] { return ring.PollSlots(); });
//   RETURN_IF_ERROR(loop.WaitUntil([&] { return ring.done(); }, deadline,
//                                  [] { return "the ring's step"; }, {1}));
#ifndef RDMAFLOW_ONESIDED_PROGRESS_PROGRESS_LOOP_H_
#define RDMAFLOW_ONESIDED_PROGRESS_PROGRESS_LOOP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "onesided/progress/wait_policy.h"
#include "rdma/blocking.h"
#include "rdma/endpoint.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

struct ProgressLoopOptions {
  // Whose loop, in messages: "rank 3", "rank 3's ring".
  std::string name = "progress loop";
  WaitPolicy wait = WaitPolicy::Adaptive();
  // How often a wait probes a silent peer it involves.
  absl::Duration liveness_interval = absl::Milliseconds(100);

  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

// Single-thread (see the file comment). Not copyable. The blocking helpers
// of waits.h (Write, Read, Flush, Barrier) wait through it (WaitFor) and
// fence through it (Drain) instead of spinning the transport themselves.
class ProgressLoop final {
 public:
  // Returns true when it took the notification (others do not see it).
  using NotificationHandler = std::function<bool(const rdma::Notification&)>;
  // Returns true when the round moved something (a slot arrived, a credit
  // went out): the wait then spins again instead of backing off.
  using RoundHandler = std::function<bool()>;
  // A probe of `peer` failed with `status` (never kCancelled).
  using PeerFailed = std::function<void(int peer, const absl::Status& status)>;

  // `transport` must outlive the loop. Options are validated: invalid ones
  // abort, so callers that take them from users call Validate() first.
  ProgressLoop(rdma::Transport& transport, ProgressLoopOptions options);
  // Stops watching every peer and progresses (at most one second) until
  // the probes in flight have completed; a probe's completion touches only
  // state it shares, so one that fires later is harmless.
  ~ProgressLoop();

  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  // Hands the loop to the calling thread (a thread that outlives the one
  // that built the loop, e.g. a backend's engine thread).
  void AdoptOnCurrentThread();
  bool OnLoopThread() const { return std::this_thread::get_id() == owner_; }
  // From any thread, after setting a condition the loop's thread waits on
  // (WaitUntil): ends its sleep in the transport's wait now
  // (Transport::InterruptWait) rather than at the sleep's end, where the
  // transport announces its activity and the loop sleeps up to
  // WaitPolicy::kAnnouncedMaxSleep there. The condition must already be
  // set: the loop looks at it again once woken.
  void InterruptWait() { transport_.InterruptWait(); }
  // Aborts, naming `caller` and the loop, off the loop's thread: for a
  // protocol's destructor, whose handlers a shared loop would otherwise go
  // on calling after it is gone.
  void CheckOnLoopThread(const std::string& caller) const;

  rdma::Transport& transport() { return transport_; }
  const ProgressLoopOptions& options() const { return options_; }

  // Handlers, by the id these return. Adding or removing inside a handler
  // is allowed (a removed handler is not called again in this round).
  int64_t AddNotificationHandler(NotificationHandler handler);
  int64_t AddRoundHandler(RoundHandler handler);
  void RemoveHandler(int64_t id);

  // Liveness. Several watchers may watch one peer (the protocols on
  // PeerLinks share one watch per peer: onesided/links); the id returned
  // ends the watch. `endpoint` stays the
  // watcher's and must stay open until Unwatch(); `on_failure` (null: the
  // loop's Fail()) runs on the loop thread, at most once per probe.
  int64_t WatchPeer(int peer, rdma::Endpoint* endpoint, PeerFailed on_failure);
  void Unwatch(int64_t watch);
  // The watcher heard from its peer (data arrived), or does not need it
  // now: this watch's next probe waits a full interval from now. Other
  // protocols' watches of the same peer keep their own schedule.
  void Rearm(int64_t watch);
  // Posts a flush to each of `peers` (every watched peer when empty) whose
  // interval has passed and that has no probe in flight.
  void ProbeIfDue(absl::Span<const int> peers = {});

  // Records the first failure: Poll() and the waits return it from then on.
  // Callable from completions that fire while the owner tears down on
  // another thread (with the destructor and Drain(), the methods that do
  // not check their thread).
  void Fail(absl::Status status);
  const absl::Status& failure() const { return failure_; }

  // One round: Transport::Progress(), notifications, round handlers. The
  // number of things that moved (completions, notifications, productive
  // round handlers), or the first failure (Progress() errors included).
  absl::StatusOr<int> Poll();

  // Polls until `ready()`, probing the peers in `probe` (none when empty:
  // a protocol may probe from its round handler instead) each liveness
  // interval and idling between empty rounds as `policy` (the loop's own
  // when omitted) says. kDeadlineExceeded "<name> timed out after
  // <elapsed> waiting for <what()>" at `deadline`; a failure (Fail(), a
  // Progress() error) with " (<name> was waiting for <what()>)" appended.
  absl::Status WaitUntil(absl::FunctionRef<bool()> ready, absl::Time deadline,
                         absl::FunctionRef<std::string()> what,
                         absl::Span<const int> probe = {});
  absl::Status WaitUntil(absl::FunctionRef<bool()> ready, absl::Time deadline,
                         absl::FunctionRef<std::string()> what,
                         absl::Span<const int> probe, const WaitPolicy& policy);

  // A protocol's wait with a "no progress for T" policy, for protocols that
  // drive their own step (a ring's turn posts and polls): calls
  // `turn(moved)` until `done()`. `turn` progresses the loop itself
  // (Poll()) and sets `moved` when its own work advanced (a message
  // arrived or left; not merely a completion of another protocol). A round
  // that moved spins again; after `stall` without a move,
  // kDeadlineExceeded "<name> timed out: no progress for <stall> waiting
  // for <what()>". Between idle rounds the peers in `probe` are probed when
  // due and the thread idles by the loop's wait policy (or `policy`, a
  // protocol's own), or, with `idle`, by `idle(limit)` (a doorbell the
  // peers ring, never past the stall). An error from `turn` returns as is.
  absl::Status WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                               absl::FunctionRef<bool()> done, absl::Duration stall,
                               absl::FunctionRef<std::string()> what,
                               absl::Span<const int> probe);
  absl::Status WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                               absl::FunctionRef<bool()> done, absl::Duration stall,
                               absl::FunctionRef<std::string()> what,
                               absl::Span<const int> probe, const WaitPolicy& policy);
  absl::Status WaitForProgress(absl::FunctionRef<absl::Status(bool& moved)> turn,
                               absl::FunctionRef<bool()> done, absl::Duration stall,
                               absl::FunctionRef<std::string()> what,
                               absl::Span<const int> probe,
                               absl::FunctionRef<void(absl::Duration limit)> idle);

  // WaitUntil() with no probes, for rdma/blocking's helpers.
  absl::Status WaitFor(absl::FunctionRef<bool()> done, absl::Time deadline,
                       absl::string_view what);

  // Teardown: calls Transport::Progress() (completions only: no
  // notifications, no round handlers, no probes) until `done()` or
  // `deadline`, whatever failed before, idling as WaitPolicy::Adaptive()
  // does (teardown never spins for seconds).
  // Returns the first Progress() error (which stops it), or OK. Like the
  // destructor, callable from the thread tearing down while no other uses
  // the loop: a protocol's destructor fences its operations with it.
  absl::Status Drain(absl::FunctionRef<bool()> done,
                     absl::Time deadline);

  // Counters since construction.
  int64_t rounds() const { return rounds_; }
  int64_t probes_posted() const { return probes_posted_; }
  int64_t unclaimed_notifications() const { return unclaimed_notifications_; }

 private:
  struct Watch;  // shared with its probes' completions
  struct Handler {
    NotificationHandler on_notification;
    RoundHandler on_round;
    bool removed = false;
  };

  // Aborts, naming the loop and `method`, off the loop's thread.
  void CheckThread(const char* method) const;
  void Probe(const std::shared_ptr<Watch>& watch, absl::Time now);
  // The backoff of a wait by `policy` (sleeping on the transport's
  // completion events where it says so), or by its ForAnnouncedActivity()
  // where the transport announces everything it could find.
  IdleBackoff Backoff(const WaitPolicy& policy);
  // The WaitForProgress()s; `idle` null: the backoff of `policy`.
  absl::Status WaitForProgressWith(absl::FunctionRef<absl::Status(bool& moved)> turn,
                                   absl::FunctionRef<bool()> done, absl::Duration stall,
                                   absl::FunctionRef<std::string()> what,
                                   absl::Span<const int> probe, const WaitPolicy& policy,
                                   const absl::FunctionRef<void(absl::Duration)>* idle);
  void Sweep();

  rdma::Transport& transport_;
  const ProgressLoopOptions options_;
  std::thread::id owner_;
  std::map<int64_t, Handler> handlers_;
  int64_t next_handler_id_ = 1;
  bool dispatching_ = false;
  int notification_handlers_ = 0;  // registered and not removed
  std::multimap<int, std::shared_ptr<Watch>> watches_;  // by peer
  int64_t next_watch_id_ = 1;
  std::shared_ptr<int64_t> probes_in_flight_ = std::make_shared<int64_t>(0);
  absl::Status failure_;
  int64_t rounds_ = 0;
  int64_t probes_posted_ = 0;
  int64_t unclaimed_notifications_ = 0;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_PROGRESS_PROGRESS_LOOP_H_
