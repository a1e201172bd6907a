// File: progress_engine.h
// -----------------------------------------------------------------------------
// ProgressEngine: the per-rank machinery every Communicator over an
// rdma::Transport shares (the zero-copy executor and the rdma_copy
// baseline): connecting to peers through the Store, counting operations in
// flight, draining, and the communicator's deadline. Progress itself (the
// Transport::Progress() calls, notifications to the owner, liveness probes,
// the adaptive wait) is the transport's onesided::ProgressLoop: the engine
// registers the owner's handlers and its peers with it.
#ifndef RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_
#define RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
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
  // Runs on `options.loop` when set (see CommunicatorOptions), else on a
  // loop of its own.
  // Leaves the loop (its handlers and watches), then collects the
  // completions of operations still in flight (after Close cancelled them),
  // so no callback outlives its owner. On the loop's thread.
  ~ProgressEngine();

  // Once, before Connect().
  void set_handlers(Handlers handlers);

  int rank() const { return transport_.rank(); }
  int world_size() const { return world_size_; }
  rdma::Transport& transport() { return transport_; }
  rdma::Store& store() { return store_; }
  const CommunicatorOptions& options() const { return options_; }

  // Publishes our address and connects to every rank in `peers`.
  absl::Status Connect(const std::vector<int>& peers);
  rdma::Endpoint* endpoint(int peer) { return endpoints_[peer].get(); }

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
  // operation in flight when it is accepted.
  absl::Status Post(const std::function<absl::Status()>& post, int peer,
                    const std::function<std::string()>& what);

  // Operations in flight: a completion callback calls Completed().
  void Started() { ++outstanding_; }
  void Completed() { --outstanding_; }
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

 private:
  rdma::Transport& transport_;
  rdma::Store& store_;
  const CommunicatorOptions options_;
  const int world_size_;
  std::vector<int> peers_;
  std::vector<std::unique_ptr<rdma::Endpoint>> endpoints_;
  int64_t outstanding_ = 0;
  absl::Status failure_;
  absl::Time next_probe_ = absl::InfinitePast();  // Poll()'s liveness probes
  // After the endpoints: it stops watching them before they close.
  std::unique_ptr<onesided::ProgressLoop> own_loop_;  // null: options_.loop
  onesided::ProgressLoop* loop_;
  std::vector<int64_t> handlers_;  // ours, on loop_
  std::vector<int64_t> watches_;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_PROGRESS_ENGINE_H_
