// File: communicator_options.h
// -----------------------------------------------------------------------------
// CommunicatorOptions: the settings every Communicator shares (rendezvous
// namespace, timeouts, tracing) plus those of the zero-copy executor.
#ifndef RDMAFLOW_RUNTIME_COMMUNICATOR_OPTIONS_H_
#define RDMAFLOW_RUNTIME_COMMUNICATOR_OPTIONS_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "onesided/progress/wait_policy.h"

namespace rdmaflow::onesided {
class PeerLinks;     // onesided/links/peer_links.h
class ProgressLoop;  // onesided/progress/progress_loop.h
}  // namespace rdmaflow::onesided

namespace rdmaflow::runtime {

struct CommunicatorOptions {
  // Prefix of every key this communicator puts in the Store; jobs (or
  // communicators of one job) sharing a store need distinct namespaces.
  std::string ns = "rdmaflow";
  // How long a call waits for a peer (to publish, deliver a tensor, release a
  // slot) before it fails with kDeadlineExceeded.
  absl::Duration timeout = absl::Seconds(60);
  // While waiting on a peer, how often to probe it (an endpoint flush), so a
  // dead peer is reported as kUnavailable long before the timeout.
  absl::Duration liveness_interval = absl::Milliseconds(100);
  // How blocking calls idle between empty progress rounds: spin, yield, then
  // sleep (onesided/progress/wait_policy.h). WaitPolicy::Spin() for a core
  // per rank and the lowest latency.
  onesided::WaitPolicy wait = onesided::WaitPolicy::Adaptive();
  // The transport's progress loop, when other protocols on the same
  // transport run on it too (a strategy's ring, its mailboxes): the
  // communicator registers its handlers and peers with it (and takes its
  // wait policy and liveness interval instead of the two above). It must
  // outlive the communicator, whose thread must be the loop's. Null: the
  // communicator runs a loop of its own.
  onesided::ProgressLoop* loop = nullptr;
  // The transport's links, when other protocols on the same transport run
  // over them (a strategy's rings and versioned readers): the communicator
  // takes its endpoint to each peer and its liveness watch from them
  // instead of connecting its own, and runs on their loop (`loop` must then
  // be null or theirs). They must outlive the communicator. Null: links of
  // its own, with its address published under `ns`.
  onesided::PeerLinks* links = nullptr;
  // Registered pools for dynamic-size tensors, per rank that sends (sources
  // the receiver reads from) and per rank that receives them (destinations).
  // Allocated only when the plan has dynamic tensors for the rank.
  size_t dynamic_pool_bytes = size_t{64} << 20;
  // Dynamic tracing: after this many steps, shapes seen identical at every
  // step promote dynamic tensors to static slots (all ranks re-plan
  // together). 0 disables it.
  int trace_steps = 3;
  // When set, Shutdown() writes a Chrome trace (JSON) of every transfer here.
  std::string trace_path;
  // true: lock-step, every transfer of the rank moves exactly once per step
  // and FinishStep() checks it. false: free-running, each transfer keeps its
  // own sequence (one Recv(id) takes the next tensor the sender sent on id,
  // whatever other transfers did), FinishStep() checks nothing, and dynamic
  // tracing is off. Parameter servers under ASP/SSP run free.
  bool lockstep = true;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_COMMUNICATOR_OPTIONS_H_
