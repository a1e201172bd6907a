// File: ibverbs_endpoint.h
// -----------------------------------------------------------------------------
// IbverbsEndpoint: RC queue pairs towards a peer (qps_per_peer of them; the
// first carries every notification). Writes are RDMA WRITE
// (WRITE WITH IMMEDIATE when notified: the immediate is the notification,
// consumed from the peer's shared receive queue after the data is placed);
// reads are RDMA READ. Work requests are signaled one in `signal_every` (and
// when posted to an idle queue); a signaled completion completes every
// earlier request (a send queue completes in order), and
// Transport::Progress() posts a signaled 8-byte read of the peer's marker
// region behind an unsignaled tail left idle, so that every callback fires.
// PostFlush is such a marker read with a callback. Operations larger than the
// device's largest message are split into several work requests (the
// notification rides on the last). With several queue pairs, operations of
// at least stripe_min bytes are split into one stripe per queue pair; a
// striped write's notification is posted on the first queue pair once every
// stripe completed, and the notifications posted after it wait behind it
// (they keep their order); a flush covers every queue pair.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_ENDPOINT_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_ENDPOINT_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/send_queues.h"

namespace rdmaflow::rdma::ibverbs {

// Thread-compatible, like its transport, which must outlive it. It posts
// through the transport's SendQueues (send_queues.h), where its lanes'
// completions are dispatched.
class IbverbsEndpoint final : public Endpoint {
 public:
  // `lanes`: the queue pairs, the first carrying notifications, already
  // added to `queues`; `context`: the device whose registrations its local
  // regions must be; at most `max_outstanding` operations in flight.
  IbverbsEndpoint(SendQueues* queues, const VerbsContext* context, size_t max_outstanding,
                  std::vector<std::shared_ptr<EndpointState>> lanes, uint64_t stripe_min);
  ~IbverbsEndpoint() override;

  int peer_rank() const override { return state_->peer_rank; }
  std::string Describe() const override;
  absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                         std::optional<uint32_t> notification,
                         Completion done) override;
  absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                        Completion done) override;
  absl::Status PostFlush(Completion done) override;

  // Stops the endpoint (Endpoint::Close) and returns only once the adapter
  // is done with every buffer of the operations in flight, so that their
  // callbacks (which fire from later Progress() calls: OK for those that
  // finished, kCancelled for the rest) really hand the buffers back. How: a
  // signaled marker behind an unsignaled tail, the queue pair to the error
  // state, then polling the send completion queue (other endpoints'
  // completions found there are queued for Progress() as usual) until each
  // request has its completion. If that takes longer than close_timeout,
  // the queue pair is destroyed, which stops the adapter as surely, and the
  // rest are cancelled (logged). Should even that fail, the callbacks of
  // what is left never run and their buffers must be leaked: kInternal
  // says so. Otherwise OK (or the error moving the queue pair to the error
  // state). Every queue pair is stopped first, then drained: blocks for
  // about close_timeout in all; idempotent; the destructor
  // calls it.
  absl::Status Close() override;

 private:
  // Not closed, not failed, and room for one more operation.
  absl::Status CheckUsable() const;
  // Checks the endpoint is usable and the slices valid; fills the local
  // scatter entry's address and key, and the remote key.
  absl::Status Prepare(const LocalSlice& local, const RemoteSlice& remote,
                       ibv_sge& sge, uint32_t& rkey) const;
  // An operation split over the queue pairs (or, behind a pending
  // notification, put on the first), its notification deferred until every
  // part completed.
  absl::Status PostParts(ibv_wr_opcode opcode, const ibv_sge& sge,
                         uint64_t length, uint64_t remote_address,
                         uint32_t rkey, std::optional<uint32_t> notification,
                         Completion done, const char* op, bool host_source);

  // What the parts' callbacks need, which may outlive the endpoint.
  struct Lanes;
  SendQueues* queues_;
  const VerbsContext* context_;
  const size_t max_outstanding_;
  std::shared_ptr<EndpointState> state_;  // The first queue pair.
  std::shared_ptr<Lanes> lanes_;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_ENDPOINT_H_
