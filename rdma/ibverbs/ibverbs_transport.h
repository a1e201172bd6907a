// File: ibverbs_transport.h
// -----------------------------------------------------------------------------
// IbverbsTransport: the native verbs backend over libibverbs (rdma-core), for
// InfiniBand and RoCE NICs (and Soft-RoCE). Reliable-connected queue pairs
// (qps_per_peer per connected peer, large operations striped across them);
// RDMA WRITE, RDMA READ; notifications as a flag record
// written behind the data into the peer's ring (notify_ring.h), or as WRITE
// WITH IMMEDIATE on a shared receive queue; a chain of work requests per
// operation behind one doorbell; inline sends for small writes; selective
// signaling. Regions are page-aligned memory registered with
// ibv_reg_mr. Peers exchange queue-pair details through a TCP handshake whose
// address is the transport's address() (bootstrap.h), or through the RDMA
// connection manager (connect=rdmacm, rdmacm.h). See docs/ibverbs.md.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/device.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/notify_ring.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/internal/completion_queue.h"
#include "rdma/internal/notification_queue.h"
#include "rdma/job_token.h"
#include "rdma/transport.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ibverbs {

// How a notified write tells its target (docs/ibverbs.md, "Notifications").
enum class NotifyMode {
  // A flag record written behind the data into the target's ring, polled by
  // its Progress(): no receive completion per message. Relies on the queue
  // pair placing its writes in order in host memory (every RC adapter in
  // practice; what perftest's latency test relies on).
  kFlag,
  // WRITE WITH IMMEDIATE: the adapter's completion says the data is placed,
  // as the InfiniBand specification guarantees; one receive completion per
  // message, and the only kind a completion channel can wake a waiter for.
  kImmediate,
};

struct IbverbsTransportOptions {
  int rank = 0;
  // Ranks of the job are 0..world_size-1: the handshake listener refuses
  // peers claiming any other. 0: unknown (only negative ranks and our own are
  // refused).
  int world_size = 0;
  DeviceOptions device;
  // The job's token (rdma/job_token.h), which every handshake must carry.
  // Unset: JobTokenFromEnvironment().
  std::optional<std::string> job_token;
  // Where the handshake listener binds: an IPv4 address, an interface name
  // or a host name. Empty: bootstrap_host if set, else RDMAFLOW_BIND_ADDR,
  // else the interface that reaches MASTER_ADDR, else the default host below
  // (see ChooseBindAddress in bootstrap.h). "0.0.0.0" binds every interface.
  std::string bind_address;
  // Address peers use for the handshake. Empty: the bound address (the
  // default host when bound to 0.0.0.0). The default host is the IPv4
  // address in the chosen RoCE GID, else this host name's address, else
  // 127.0.0.1.
  std::string bootstrap_host;
  absl::Duration connect_timeout = absl::Seconds(10);
  // Handshake listener: how long a peer may take from connecting to
  // confirming before its connection is closed and the queue pair created
  // for it freed; and how many queue pairs may await confirmation at once.
  absl::Duration handshake_timeout = absl::Seconds(10);
  int max_pending_queue_pairs = 32;
  // How long Close() waits for the adapter to flush what was in flight
  // before it destroys the queue pair to stop it (endpoint.h).
  absl::Duration close_timeout = absl::Seconds(5);
  // Operations one endpoint accepts in flight before kResourceExhausted.
  size_t max_outstanding_per_endpoint = 256;
  // Every n-th work request is signaled (selective signaling); the rest
  // complete with it. An idle endpoint's unsignaled tail is completed by a
  // signaled 8-byte marker read.
  int signal_every = 16;
  // Writes up to this size go inline (if the device allows as much).
  uint32_t max_inline = 64;
  // Local ACK timeout exponent (4.096 us * 2^n) and retry count: a dead peer
  // fails operations after about retry_count * that.
  int ack_timeout = 14;
  int retry_count = 7;
  // Receives kept posted on the shared receive queue (notifications).
  int receive_depth = 512;
  // Notifications this transport sends: kFlag where the peer offers a ring
  // (and the device can write 8 bytes inline), else kImmediate. It also
  // decides whether the listener offers accepted peers a ring. kImmediate
  // by default: one packet per notified write, where a flag costs two (on
  // Soft-RoCE the second packet doubles an 8-byte write's latency; see
  // docs/ibverbs.md, "Notifications").
  NotifyMode notify = NotifyMode::kImmediate;
  // Records in the ring offered to each accepted peer (a power of two,
  // kMinNotifySlots..kMaxNotifySlots): flag notifications a sender may have
  // outstanding before kResourceExhausted.
  uint32_t notify_slots = 256;
  // A completion channel behind the completion queues, so that
  // WaitForActivity() sleeps until a completion or a WRITE WITH IMMEDIATE
  // arrives instead of for its whole timeout. Flag notifications raise no
  // completion at the target: they are seen when the timeout ends.
  bool completion_events = false;
  // Queue pairs per connected peer (1..16). Operations of at least
  // stripe_min bytes are split across them in equal stripes (4 KiB
  // multiples); smaller ones, flushes' last marker and every notification
  // go on the first. A notification of a striped write is posted on the
  // first queue pair once every stripe has completed, and later
  // notifications of the endpoint wait behind it, so they keep their order.
  int qps_per_peer = 1;
  uint64_t stripe_min = uint64_t{256} << 10;
  // Endpoints one peer may hold to this transport at once (several
  // components each open their own; a 2-member ring opens two). The
  // listener refuses a claimed rank's connection beyond
  // max_endpoints_per_peer * qps_per_peer (docs/security.md).
  int max_endpoints_per_peer = 32;
  // Connect queue pairs through the RDMA connection manager (rdmacm.h)
  // instead of the TCP handshake: the listener is an rdmacm listener on the
  // bind address (which must be the device interface's), peers' deaths are
  // its disconnect events. Every rank of a job must use the same.
  bool use_rdmacm = false;
};

// What the transport did, for tests and logs.
struct IbverbsTransportStats {
  // Queue pairs created for peers' Connect() (freed when their connection
  // closes or their handshake is abandoned), and those freed so far.
  size_t accepted_queue_pairs = 0;
  int64_t retired_queue_pairs = 0;
  // Endpoints stopped whose queue pair had to be destroyed because the
  // adapter did not flush it within close_timeout.
  int64_t fenced_queue_pairs = 0;
  BootstrapListenerStats listener;
};

// Thread-compatible (see Transport); its handshake listener (TCP or rdmacm)
// runs on a thread of its own and shares the accepted queue pairs, their
// ranks, their rings and the retired ones, under a mutex.
class IbverbsTransport final : public Transport {
 public:
  // kUnavailable when there is no usable RDMA device (with what to check).
  static absl::StatusOr<std::unique_ptr<IbverbsTransport>> Create(
      const IbverbsTransportOptions& options);
  ~IbverbsTransport() override;

  int rank() const override { return options_.rank; }
  Capabilities capabilities() const override;
  std::string address() const override { return address_; }
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override;
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override;
  // ibv_reg_dmabuf_mr: GPUDirect RDMA, where the NIC's driver takes
  // dma-bufs (DmaBufRegistrationError says why not). Unverified here: no
  // NIC of this project's machines reaches a GPU (docs/device.md).
  absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;
  std::optional<Notification> PollNotification() override;
  // With completion_events: arms both completion queues, takes what arrived
  // meanwhile (for the next Progress()), else sleeps on the channel.
  // Without: the default sleep.
  bool WaitForActivity(absl::Duration timeout) override;

  // Where the handshake listener is bound and why ("127.0.0.1:41234, the
  // interface that reaches MASTER_ADDR=127.0.0.1").
  std::string handshake_address() const { return handshake_address_; }
  // From the thread that drives Progress(), like the rest.
  IbverbsTransportStats stats() const;

 private:
  friend class IbverbsEndpoint;
  friend class AcceptedQueuePair;

  IbverbsTransport(const IbverbsTransportOptions& options, JobToken token)
      : options_(options), job_token_(std::move(token)) {}
  absl::Status Init();
  absl::StatusOr<MemoryRegion> RegisterMemory(void* data, size_t bytes,
                                              void* owned);
  absl::Status PostReceives(int& count);
  // Answers a peer's handshake (on the listener thread): creates and
  // connects its queue pair, owned by the returned AcceptedPeer.
  absl::StatusOr<Accepted> Accept(const QueuePairInfo& request);
  // The same for an rdmacm connect request (on the rdmacm listener's thread).
  absl::StatusOr<CmAccepted> AcceptCm(const CmPeerInfo& request,
                                      rdma_cm_id* id);
  // kUnavailable, naming both, unless the connection manager routes `id`
  // through this transport's device.
  absl::Status CheckCmDevice(rdma_cm_id* id, int peer_rank) const;
  // What both answer with: creates the queue pair, lets `connect` move it to
  // RTS, offers a ring where the peer named a credit word.
  absl::StatusOr<Accepted> AcceptQueuePair(
      int rank, uint64_t credit_address, uint32_t credit_rkey,
      absl::FunctionRef<absl::Status(ibv_qp*, uint32_t psn)> connect);
  // The listener released a peer (on the listener thread): the queue pair
  // moves to the error state and waits in retired_ for Progress() to drain
  // the receive queue of its completions and destroy it.
  void RetireAccepted(uint32_t qpn);
  QueuePairOptions QpOptions() const;
  QueuePairInfo WithMarker(QueuePairInfo info) const;

  // The data path, called by IbverbsEndpoint and Progress().
  // One operation of `length` bytes from `sge.addr`, split into work
  // requests of at most the device's largest message, followed by the
  // notification's flag record where the peer takes them; one doorbell.
  // As PostChain(), `done` is taken only when the operation is accepted.
  // Small writes go inline (the CPU copies them at post time) unless the
  // source is device memory (`host_source` false: GPUDirect RDMA).
  absl::Status PostOperation(EndpointState& state, ibv_wr_opcode opcode,
                             std::optional<uint32_t> notification,
                             const ibv_sge& sge, uint64_t length,
                             uint64_t remote_address, uint32_t rkey,
                             Completion&& done, const char* op,
                             bool host_source);
  // Work requests an operation of `length` bytes takes (one per largest
  // message of the port).
  uint64_t RequestsFor(uint64_t length) const;
  // Whether `state` can take `requests` more work requests (and a marker),
  // beside the notifications reserved on it.
  bool HasRoom(const EndpointState& state, uint64_t requests) const;
  // Room in `state`'s flag ring for one more record: kResourceExhausted
  // when full; kDataLoss (and the endpoint fails) for a forged credit.
  absl::Status CheckRingRoom(EndpointState& state);
  // A notification to post later on `state` (behind stripes still in
  // flight): takes its place in the send queue, and its ring record in flag
  // mode. kResourceExhausted when there is no room; kDataLoss for a forged
  // credit (the endpoint fails).
  absl::StatusOr<std::optional<NotifyRingWriter::Next>> ReserveNotification(
      EndpointState& state, uint32_t value);
  // Posts a reserved notification (a zero-byte WRITE WITH IMMEDIATE, or the
  // reserved record); `done` rides on it. If it cannot be posted, `done`
  // fires from the next Progress() with the error.
  void PostReservedNotification(EndpointState& state, uint32_t value,
                                std::optional<NotifyRingWriter::Next> record,
                                Completion done);
  // One queue pair and its handshake towards `peer` at host:port (the
  // listener `target`); `notifies`: it carries the endpoint's notifications
  // (may take flags).
  absl::StatusOr<std::shared_ptr<EndpointState>> ConnectLane(
      const PeerInfo& peer, const std::string& host, int port,
      const HandshakeTarget& target, bool notifies);
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
  absl::Status PostMarker(EndpointState& state, Completion&& done,
                          bool has_callback);
  void Complete(EndpointState& state, WorkRequest& request,
                absl::Status status);
  void HandleSendCompletion(const ibv_wc& wc);
  // Polls the send completion queue once; how many completions it handled.
  absl::StatusOr<int> PollSendQueue();
  // Takes the receive completion queue's notifications; how many receives
  // were consumed.
  absl::StatusOr<int> PollReceiveQueue();
  // A ring the listener offered an accepted peer (notify_ring.h); the queue
  // pair is the accepted one, which also carries the credits back.
  struct AcceptedRing {
    uint32_t qpn = 0;
    int rank = -1;
    ibv_qp* qp = nullptr;  // Owned by accepted_, then retired_.
    uint32_t max_inline = 0;  // What its queue pair writes inline.
    MemoryRegion memory;   // The records, then the credit's source word.
    std::optional<NotifyRingReader> reader;
    uint64_t credit_address = 0;
    uint32_t credit_rkey = 0;
  };
  // Delivers what arrived in the rings; sends the credits due.
  int PollRings();
  // False when the post failed (logged).
  bool SendCredit(AcceptedRing& ring, uint64_t consumed);
  // A reserved ring record of `state` will never be written: fails the
  // endpoint (the target would wait for it before any later one).
  void FailRing(EndpointState& state, const absl::Status& why);
  // Takes the rings and retirements the listener queued (under mutex_).
  void TakeListenerChanges(
      std::vector<std::pair<uint32_t, QpPtr>>& retiring);
  // Forgets the retired queue pairs TakeListenerChanges() took, drops their
  // rings, and destroys them.
  void DropRetired(std::vector<std::pair<uint32_t, QpPtr>>& retiring);
  void FailAll(EndpointState& state, const absl::Status& status);
  void Forget(uint64_t endpoint_id);
  // Fails the endpoints whose peer closed its handshake connection, and
  // fences stopped endpoints whose flush is overdue.
  void WatchPeers();
  // Puts a signaled marker behind the unsignaled tail of each endpoint that
  // posted nothing since the last Progress() (Progress() calls it only
  // while sweep_due_).
  void SweepIdleTails();
  // Stops `state`'s queue pair: a signaled marker behind an unsignaled tail,
  // then the error state, so that every request still queued ends with a
  // completion (a flush error, or success for the marker), and `reason` for
  // the flushed ones. Only after that completion may the callbacks fire.
  absl::Status Stop(EndpointState& state, absl::Status reason);
  // Close(): Stop(), then polls until every request of `state` completed,
  // or close_timeout passes (then Fence()).
  absl::Status CloseEndpoint(EndpointState& state);
  // The flush did not come: destroys the queue pair, after which the
  // adapter no longer touches the buffers, then fails what is left. If even
  // that fails, the callbacks are leaked (never run) so that nobody frees a
  // buffer the adapter may still write; kInternal says so.
  absl::Status Fence(EndpointState& state);

  const IbverbsTransportOptions options_;
  std::shared_ptr<VerbsContext> context_;
  ChannelPtr channel_;  // Before the CQs: it outlives them.
  bool armed_ = false;  // Both CQs asked for an event since the last one.
  CqPtr send_cq_;
  CqPtr recv_cq_;
  SrqPtr srq_;
  // 64 readable bytes (the peers' marker target) and 64 scratch bytes.
  MemoryRegion marker_;
  const JobToken job_token_;
  // The listener's random id, published in address(): a handshake MAC'd
  // for an earlier process at the same address does not verify here.
  uint64_t instance_ = 0;
  std::string address_;
  std::string handshake_address_;
  std::string description_;

  mutable absl::Mutex mutex_;
  // The sender's rank of each accepted queue pair, for notifications.
  absl::flat_hash_map<uint32_t, int> rank_of_qp_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<uint32_t, QpPtr> accepted_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::pair<uint32_t, QpPtr>> retired_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<AcceptedRing>> new_rings_ ABSL_GUARDED_BY(mutex_);
  // Set by the listener when retired_ or new_rings_ grew: Progress() takes
  // the lock only then.
  std::atomic<bool> listener_changed_{false};
  // The rings of accepted peers, polled by Progress() (its thread only).
  std::vector<std::unique_ptr<AcceptedRing>> rings_;
  // Progress()'s copy of rank_of_qp_, refreshed with the listener's changes.
  absl::flat_hash_map<uint32_t, int> ranks_;
  // Receives consumed and not yet reposted, and the batch that reposts them.
  int unposted_receives_ = 0;
  int repost_batch_ = 1;
  int64_t retired_count_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t fenced_count_ = 0;

  absl::flat_hash_map<uint64_t, std::shared_ptr<EndpointState>> endpoints_;
  uint64_t next_endpoint_id_ = 1;
  absl::Time next_watch_ = absl::InfinitePast();
  // Set when a post left an endpoint's tail unsignaled: only then does
  // Progress() sweep the endpoints for idle ones that need a marker.
  bool sweep_due_ = false;
  ::rdmaflow::rdma::internal::CompletionQueue completions_;
  rdma::internal::NotificationQueue notifications_{
      "rdmaflow ibverbs", rdma::internal::NotificationQueue::kDefaultCapacity};
  std::unique_ptr<BootstrapListener> listener_;  // Stopped first.
  std::unique_ptr<CmListener> cm_listener_;     // With use_rdmacm, instead.
};

// Registers "ibverbs" (priority 50) with parameters device, port, gid_index,
// bootstrap_host, bind_address, world_size, max_outstanding, signal_every,
// max_inline, ack_timeout, retry_count, notify (flag|imm), notify_slots,
// events (0|1: completion_events), qps_per_peer, stripe_min, connect
// (tcp|rdmacm), max_endpoints_per_peer.
// The job token comes from the environment.
absl::Status RegisterIbverbsTransport(TransportRegistry& registry);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_
