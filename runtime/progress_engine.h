// File: progress_engine.h
// -----------------------------------------------------------------------------
// ProgressEngine: the per-rank machinery every Communicator over an
// rdma::Transport shares (the zero-copy executor and the rdma_copy
// baseline): its peers' links, counting the operations in flight it is
// told of (Post(), Started()/Completed(): the executor's; rdma_copy's slot
// links count and fence their own), draining, giving up, and the
// communicator's deadline. Progress itself (the
// Transport::Progress() calls, notifications to the owner, liveness probes,
// the adaptive wait) is the transport's onesided::ProgressLoop: the engine
// registers the owner's handlers with it. Connections are a PeerLinks'
// (onesided/links): the data lane to each peer and its one liveness watch,
// shared with the other protocols on the links (a strategy's rings, its
// versioned readers), or links of the engine's own when it has none.
#ifndef RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_
#define RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/endpoint.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "runtime/communicator_options.h"

namespace rdmaflow::runtime {

// Single-thread: the thread that created it (its loop checks, see
// docs/thread_model.md). No locks.
class ProgressEngine {
 public:
  // Called for each notification, and once per round after them.
  struct Handlers {
    std::function<void(const rdma::Notification&)> on_notification;
    std::function<void()> on_round;
  };

  ProgressEngine(rdma::Transport& transport, rdma::Store& store,
                 const CommunicatorOptions& options, int world_size);
  // Runs on the loop of `options.links` when set, else on `options.loop`
  // when set (see CommunicatorOptions), else on a loop of its own.
  // Close(). On the loop's thread.
  ~ProgressEngine();

  // Leaves the loop (its handlers) and the links (its subscriptions), then
  // collects the completions of operations still in flight (links of its
  // own are closed first, which cancels them; shared ones are fenced), so
  // that an owner can tell what never completed before it frees memory
  // (outstanding() > 0 after it). Completions that come later touch
  // nothing of the engine's. Idempotent; the engine polls no more.
  void Close();

  // Once, before Connect().
  void set_handlers(Handlers handlers);

  int rank() const { return transport_.rank(); }
  int world_size() const { return world_size_; }
  rdma::Transport& transport() { return transport_; }
  rdma::Store& store() { return store_; }
  const CommunicatorOptions& options() const { return options_; }

  // Takes `options.links`, or makes links of its own (publishing our
  // address under options.ns), then the data lane to every rank in `peers`
  // and a subscription to its liveness (a dead peer fails the engine).
  // kInvalidArgument when options.links run another transport or another
  // loop than options.loop; the links' errors.
  absl::Status Connect(const std::vector<int>& peers);
  // The data lane to `peer` (the links'), after Connect(); null for a rank
  // that is not a peer.
  rdma::Endpoint* endpoint(int peer) { return endpoints_[peer]; }
  // After Connect().
  const onesided::PeerLinks& links() const { return *links_; }
  // For the owner's records (runtime/link_records.h), on the loop's thread.
  onesided::PeerLinks& links() { return *links_; }

  // One round: transport progress, notifications, the owner's round, and
  // the peers' liveness probes when due (a dead peer fails the engine
  // within the liveness bound, also for a caller that never waits). Returns
  // the first failure recorded so far.
  absl::Status Poll();

  // Polls until `ready()`; kDeadlineExceeded with `what()` after the
  // timeout; the first failure, with `what()` appended (kUnavailable for a
  // peer found dead: `peer`, or every peer when -1, is probed every
  // liveness_interval). Idles between empty rounds as options().wait says.
  absl::Status WaitUntil(const std::function<bool()>& ready, int peer,
                         const std::function<std::string()>& what);

  // Runs `post` until it is not refused for a full queue; counts the
  // operation to `peer` in flight when it is accepted.
  absl::Status Post(const std::function<absl::Status()>& post, int peer,
                    const std::function<std::string()>& what);

  // Operations in flight, by peer: a completion callback calls
  // Completed(peer). Giving up fences only the peers with some.
  void Started(int peer) {
    ++outstanding_;
    ++in_flight_[peer];
  }
  void Completed(int peer) {
    --outstanding_;
    --in_flight_[peer];
  }
  int64_t outstanding() const { return outstanding_; }

  // Records the first failure of an asynchronous operation, or of a peer
  // (its liveness probe). The engine's own: on a shared loop the other
  // protocols go on (a ring finishing its shutdown); the loop's failure (a
  // Progress() error) ends the engine's waits too.
  void Fail(absl::Status status) {
    if (failure_.ok()) failure_ = std::move(status);
  }
  const absl::Status& failure() const { return failure_; }
  onesided::ProgressLoop& loop() { return *loop_; }

  // Flushes every connected endpoint, then waits until nothing is in flight
  // and `idle()` holds.
  absl::Status Drain(const std::function<bool()>& idle,
                     const std::function<std::string()>& what);

  // Blocks until every rank entered barrier `name` (once per name and job).
  absl::Status Barrier(const std::string& name);

  // Giving up on operations posted to `peers`: on shared links
  // (PeerLinks::Fence) waits for `done()` half the time to `deadline`, then
  // severs those peers (which cancels what is posted, and tells every
  // protocol on them) and waits again; on links of its own severs them at
  // once (nobody else uses them) and waits. True once `done()`.
  bool Fence(absl::Span<const int> peers, absl::FunctionRef<bool()> done, absl::Time deadline,
             absl::string_view why);

 private:
  rdma::Transport& transport_;
  rdma::Store& store_;
  const CommunicatorOptions options_;
  const int world_size_;
  std::vector<int> peers_;
  std::vector<rdma::Endpoint*> endpoints_;  // the links', by rank
  int64_t outstanding_ = 0;
  std::vector<int64_t> in_flight_;  // by rank
  absl::Status failure_;
  absl::Time next_probe_ = absl::InfinitePast();  // Poll()'s liveness probes
  // The loop outlives the links made on it (declared first, goes last).
  std::unique_ptr<onesided::ProgressLoop> own_loop_;  // null: the links' or options_'
  onesided::ProgressLoop* loop_;
  std::unique_ptr<onesided::PeerLinks> own_links_;  // null: options_.links
  onesided::PeerLinks* links_ = nullptr;            // set by Connect()
  std::vector<int64_t> handlers_;       // ours, on loop_
  std::vector<int64_t> subscriptions_;  // ours, on links_
  bool closed_ = false;
  // Completions of the engine's own operations (Drain()'s flushes) that
  // come after it went touch nothing.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_
