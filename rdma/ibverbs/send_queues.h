// File: send_queues.h
// -----------------------------------------------------------------------------
// SendQueues: the send side of the ibverbs transport's connected queue pairs.
// It keeps every connected endpoint's queue-pair state (EndpointState, by
// id), posts work requests on it (an operation split at the port's largest
// message with its notification's flag record behind, markers, reserved
// notifications; selective signaling; one doorbell per chain), dispatches
// the send completion queue's completions to their requests in order,
// queues the callbacks for Progress() to fire, and stops, closes and fences
// queue pairs (docs/ibverbs.md). IbverbsEndpoint posts through it; the
// transport's Progress() polls it.
#ifndef RDMAFLOW_RDMA_IBVERBS_SEND_QUEUES_H_
#define RDMAFLOW_RDMA_IBVERBS_SEND_QUEUES_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/endpoint.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/internal/notify_ring.h"
#include "rdma/internal/completion_queue.h"
#include "rdma/memory_region.h"

namespace rdmaflow::rdma::ibverbs {

struct SendQueueOptions {
  int rank = 0;
  // Every n-th work request is signaled; an idle tail gets a marker.
  int signal_every = 16;
  // Work requests a queue pair takes (every operation may be followed by a
  // marker).
  uint64_t send_depth = 0;
  // How long a stopped queue pair may take to flush before it is destroyed.
  absl::Duration close_timeout = absl::Seconds(5);
  // The port's largest message: longer operations take several requests.
  uint64_t max_message = 4096;
};

// Single-thread: the thread that drives the transport's Progress().
class SendQueues {
 public:
  // `send_cq` is every connected queue pair's send completion queue;
  // `marker` the transport's marker region (its second 64 bytes receive
  // the markers' reads). Both must outlive it.
  SendQueues(const SendQueueOptions& options, ibv_cq* send_cq,
             const MemoryRegion& marker);

  SendQueues(const SendQueues&) = delete;
  SendQueues& operator=(const SendQueues&) = delete;

  // A new queue pair's state towards `peer_rank`, with its id; its
  // completions find it once Add()ed (after its handshake).
  std::shared_ptr<EndpointState> NewState(int peer_rank);
  void Add(std::shared_ptr<EndpointState> state);
  // The endpoint is gone: late completions of its id are ignored.
  void Forget(uint64_t id);

  // --- The data path (IbverbsEndpoint) ---
  // Work requests an operation of `length` bytes takes.
  uint64_t RequestsFor(uint64_t length) const;
  // Whether `state` can take `requests` more work requests (and a marker),
  // beside the notifications reserved on it.
  bool HasRoom(const EndpointState& state, uint64_t requests) const;
  // One operation of `length` bytes from `sge.addr`, split into work
  // requests of at most the largest message, followed by the notification's
  // flag record where the peer takes them; one doorbell. `done` is taken
  // only when the operation is accepted. Small writes go inline unless the
  // source is device memory (`host_source` false).
  absl::Status PostOperation(EndpointState& state, ibv_wr_opcode opcode,
                             std::optional<uint32_t> notification,
                             const ibv_sge& sge, uint64_t length,
                             uint64_t remote_address, uint32_t rkey,
                             Completion&& done, const char* op,
                             bool host_source);
  // An 8-byte read of the peer's marker word, signaled: a flush (with a
  // callback) or a completion marker behind an unsignaled tail.
  absl::Status PostMarker(EndpointState& state, Completion&& done,
                          bool has_callback);
  // A notification to post later on `state` (behind stripes still in
  // flight): takes its place in the send queue, and its ring record in flag
  // mode. kResourceExhausted when there is no room; kDataLoss for a forged
  // credit (the endpoint fails).
  absl::StatusOr<std::optional<NotifyRingWriter::Next>> ReserveNotification(
      EndpointState& state, uint32_t value);
  // Posts a reserved notification; `done` rides on it. If it cannot be
  // posted, `done` fires from the next Progress() with the error.
  void PostReservedNotification(EndpointState& state, uint32_t value,
                                std::optional<NotifyRingWriter::Next> record,
                                Completion done);
  // A reserved ring record of `state` will never be written: fails the
  // endpoint (the target would wait for it before any later one).
  void FailRing(EndpointState& state, const absl::Status& why);
  // `done` fires with `status` from the next Progress().
  void Defer(Completion done, absl::Status status) {
    completions_.Push(std::move(done), std::move(status));
  }
  // Stops `state`'s queue pair: a signaled marker behind an unsignaled tail,
  // then the error state, so that every request still queued ends with a
  // completion (a flush error, or success for the marker), and `reason` for
  // the flushed ones. Only after that completion may the callbacks fire.
  absl::Status Stop(EndpointState& state, absl::Status reason);
  // Close(): Stop(), then polls until every request of `state` completed,
  // or close_timeout passes (then Fence()).
  absl::Status CloseEndpoint(EndpointState& state);

  // --- Progress (the transport) ---
  // Completions taken per poll: a poll that took as many may have left more.
  static constexpr int kPollBatch = 32;
  // Polls the send completion queue once; how many completions it handled.
  absl::StatusOr<int> Poll();
  // Fails the endpoints whose peer closed its handshake connection, and
  // fences stopped endpoints whose flush is overdue (every 50 ms).
  void WatchPeers();
  // Puts a signaled marker behind the unsignaled tail of each endpoint that
  // posted nothing since the last call; a no-op unless a post left one (the
  // walk over the endpoints is not on every Progress()).
  void SweepIdleTails();
  // Fires the queued callbacks; how many.
  int FireCompletions() { return completions_.FireAll(); }
  bool HasCompletions() const { return !completions_.empty(); }
  // Queue pairs destroyed because they did not flush in time.
  int64_t fenced() const { return fenced_count_; }

 private:
  // Room in `state`'s flag ring for one more record: kResourceExhausted
  // when full; kDataLoss (and the endpoint fails) for a forged credit.
  absl::Status CheckRingRoom(EndpointState& state);
  // Posts `count` linked work requests with one ibv_post_send; `done` rides
  // on the last. Signals the last when the queue was idle (so a lone
  // operation needs no marker) or `force_signal`, and any whose unsignaled
  // run reaches signal_every. A chain the adapter took only in part is
  // accepted, fails the endpoint, and completes `done` with that error
  // (WorkRequest::forced) once the requests taken are done.
  // kFailedPrecondition once the queue pair was destroyed (Fence()).
  // `done` is taken only when the chain is accepted (OK returned): a caller
  // whose post is refused still holds it.
  absl::Status PostChain(EndpointState& state, ibv_send_wr* wrs, int count,
                         Completion&& done, bool has_callback, const char* op,
                         bool force_signal);
  void Complete(EndpointState& state, WorkRequest& request,
                absl::Status status);
  void FailAll(EndpointState& state, const absl::Status& status);
  void HandleCompletion(const ibv_wc& wc);
  // The flush did not come: destroys the queue pair, after which the
  // adapter no longer touches the buffers, then fails what is left. If even
  // that fails, the callbacks are leaked (never run) so that nobody frees a
  // buffer the adapter may still write; kInternal says so.
  absl::Status Fence(EndpointState& state);

  const SendQueueOptions options_;
  ibv_cq* const send_cq_;
  const MemoryRegion& marker_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<EndpointState>> endpoints_;
  uint64_t next_endpoint_id_ = 1;
  absl::Time next_watch_ = absl::InfinitePast();
  // Set when a post left an endpoint's tail unsignaled: only then does
  // SweepIdleTails() look for idle ones that need a marker.
  bool sweep_due_ = false;
  int64_t fenced_count_ = 0;
  ::rdmaflow::rdma::internal::CompletionQueue completions_;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_SEND_QUEUES_H_
