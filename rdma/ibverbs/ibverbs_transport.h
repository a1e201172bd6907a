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

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/ibverbs/acceptor.h"
#include "rdma/ibverbs/accepted_peers.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/connector.h"
#include "rdma/ibverbs/device.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/notify_inbox.h"
#include "rdma/internal/notify_ring.h"
#include "rdma/ibverbs/queue_pair_factory.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/ibverbs/registration.h"
#include "rdma/ibverbs/send_queues.h"
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

// The most queue pairs per connected peer (IbverbsTransportOptions::qps_per_peer).
inline constexpr int kMaxQueuePairsPerPeer = 16;

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
// ranks, their rings and the retired ones through AcceptedPeers. The
// transport wires its parts, each in a file of its own: registration
// (registration.h), the connecting and accepting sides (connector.h,
// acceptor.h), the connected queue pairs' posting and completion dispatch
// (send_queues.h, used by IbverbsEndpoint), and the notifications' arrival
// (notify_inbox.h).
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
  IbverbsTransport(const IbverbsTransportOptions& options, JobToken token)
      : options_(options), job_token_(std::move(token)) {}
  // Opens the device, makes the queues and the parts below, starts the
  // listener.
  absl::Status Init();
  // Destroys the queue pairs the listener retired (after their rings and
  // the receive queue were polled a last time) and forgets them.
  void DropRetired(std::vector<std::pair<uint32_t, QpPtr>>& retiring);

  const IbverbsTransportOptions options_;
  const JobToken job_token_;
  // Declared in the order they are made; each goes before what it uses.
  std::shared_ptr<VerbsContext> context_;
  ChannelPtr channel_;  // Before the CQs: it outlives them.
  bool armed_ = false;  // Both CQs asked for an event since the last one.
  CqPtr send_cq_;
  CqPtr recv_cq_;
  SrqPtr srq_;
  std::unique_ptr<Registrar> registrar_;
  // 64 readable bytes (the peers' marker target) and 64 scratch bytes.
  MemoryRegion marker_;
  // The listener's random id, published in address(): a handshake MAC'd
  // for an earlier process at the same address does not verify here.
  uint64_t instance_ = 0;
  std::string address_;
  std::string handshake_address_;
  std::string description_;
  // Connected queue pairs: posting, completions, stop and fence.
  std::unique_ptr<SendQueues> queues_;
  // Accepted queue pairs, shared with the listener's thread.
  AcceptedPeers peers_;
  // Notifications: receives and the accepted peers' rings.
  std::unique_ptr<NotifyInbox> inbox_;
  QueuePairFactory factory_;
  std::unique_ptr<Acceptor> acceptor_;
  std::unique_ptr<Connector> connector_;
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
