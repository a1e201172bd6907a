// File: ucx_transport.h
// -----------------------------------------------------------------------------
// UcxTransport: the default backend, over UCX's UCP layer: ucp_mem_map for
// regions (ALLOCATE for Transport::Allocate, so that shared-memory put/get
// are truly one-sided), packed rkeys in descriptors, ucp_put_nbx/ucp_get_nbx,
// flush, and for notifications a flag in a same-host peer's shared-memory
// inbox (flag_inbox.h) or else an active message sent after a flush. UCX
// picks shared memory (posix, cma), TCP or verbs (rc/dc) by itself, or as the
// `tls` option says. Dead peers are found by a process watchdog (same host
// and PID namespace) or by UCX keepalive and endpoint error handling (other
// hosts and containers). See docs/rdma.md.
#ifndef RDMAFLOW_RDMA_UCX_UCX_TRANSPORT_H_
#define RDMAFLOW_RDMA_UCX_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/peer_copy.h"
#include "rdma/internal/notification_queue.h"
#include "rdma/transport.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ucx {

struct UcxTransportOptions {
  int rank = 0;
  // UCX_TLS for this transport, e.g. "shm" (posix, sysv, cma), "tcp",
  // "rc_verbs,ud_verbs". Empty: UCX's own choice (the UCX_TLS environment
  // variable if set, else all available).
  std::string tls;
  // UCX_NET_DEVICES for this transport: the network interfaces TCP uses and
  // the RDMA ports, comma-separated, e.g. "eth0", "mlx5_0:1,eth0", "all".
  // Empty: the UCX_NET_DEVICES environment variable if set, else TCP on the
  // loopback interface only, plus every RDMA port (net_devices.h). A job
  // whose ranks talk TCP across hosts must name its interface here.
  std::string net_devices;
  // How often peers are checked for liveness (a process check for peers on
  // this host in our PID namespace, UCX keepalive for the others); a dead
  // peer's operations fail within two intervals (docs/rdma.md).
  absl::Duration keepalive_interval = absl::Milliseconds(500);
  // UCX_TCP_TX_SEG_SIZE, the piece UCX's TCP transport sends a large put
  // in, in KiB: 64 (UCX's default is 8; at most 64, TCP's receive
  // segment), where TCP may run (MayUseTcp) and the UCX_TCP_TX_SEG_SIZE
  // environment variable is not set; 0 leaves UCX's. Eight times fewer send
  // calls for the same bytes: about 30 % less system time for a 4-rank
  // ring over 1 Gbit/s links, and steps 3-6 % shorter where the ranks share
  // their cores with compute (docs/rdma.md, "TCP's send size").
  int64_t tcp_tx_seg_kb = 64;
  // Operations one endpoint accepts in flight before kResourceExhausted.
  size_t max_outstanding_per_endpoint = 1024;
  // Writes into a same-host peer's shared memory (copies through its
  // mapping) of at least this many bytes use streaming stores, which do
  // not wait on the peer's cache (common/peer_copy.h; docs/rdma.md,
  // "Streaming copies into a peer"); 0: plain copies at every size.
  size_t streaming_copy_min = kDefaultStreamingCopyMinBytes;
  // Notified writes to a same-host peer as flags in its shared-memory inbox
  // (flag_inbox.h): the data's put, a fence and an 8-byte record, which the
  // peer's Progress() polls. False: by active message after a flush, as to
  // every other peer; the transport then offers no inbox either. Flags are
  // used only where both sides take them (docs/rdma.md).
  bool flag_notifications = true;
  // Notifications received and not yet polled that are kept; more are
  // dropped, counted and logged (internal/notification_queue.h).
  size_t max_queued_notifications = internal::NotificationQueue::kDefaultCapacity;
};

class FlagInboxReader;
class UcxEndpoint;
struct ProcessIdentity;
struct UcxContext;
struct UcxEndpointState;
struct UcxWorkerState;
struct UcxOp;

// Thread-compatible (UCS_THREAD_MODE_SERIALIZED worker: any thread, one at a
// time, as the c10d backend hands the transport between its engine thread
// and a caller running a small collective): see Transport.
class UcxTransport final : public Transport {
 public:
  // kUnavailable when UCX cannot start with these options (e.g. a `tls` with
  // no usable device), with UCX's reason; kInvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(
      const UcxTransportOptions& options);
  ~UcxTransport() override;

  int rank() const override { return options_.rank; }
  Capabilities capabilities() const override;
  std::string address() const override { return address_; }
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override;
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;
  std::optional<Notification> PollNotification() override;
  // Where the TLS in effect is TCP alone (net_devices.h, OnlyTcp), the
  // worker has UCX's wakeup feature: the wait arms it (ucp_worker_arm) and
  // sleeps on its event file descriptor, and AnnouncesActivity() is true.
  // Elsewhere (shared memory's puts raise no event) the base's sleep.
  bool WaitForActivity(absl::Duration timeout) override;
  bool AnnouncesActivity() const override { return event_fd_ >= 0; }
  // Signals the worker (ucp_worker_signal, safe from any thread): the wait
  // in progress, or the next one, ends at once. Nothing where the worker
  // has no wakeup feature (its waits are plain sleeps). Not during or
  // after the transport's destruction: the worker's descriptors close.
  void InterruptWait() override;
  // Notifications dropped because max_queued_notifications were waiting,
  // and ones refused as malformed, so far.
  uint64_t dropped_notifications() const { return notifications_.dropped(); }
  uint64_t malformed_notifications() const { return notifications_.malformed(); }

  // The UCP context (for the backend's own bookkeeping).
  ucp_context_h context() const;

 private:
  UcxTransport(const UcxTransportOptions& options,
               std::shared_ptr<UcxContext> context);
  absl::StatusOr<MemoryRegion> Map(void* address, size_t bytes, bool allocate);
  // Fails the endpoints whose same-host peer process has exited.
  void WatchPeers();
  // Finishes the graceful endpoint closes that UCX has completed.
  void PollClosing();

  const UcxTransportOptions options_;
  // NET_DEVICES in effect, for messages ("UCX_NET_DEVICES=..." when set by
  // the environment).
  std::string net_devices_;
  // TCP was restricted to the loopback interface by default.
  bool tcp_on_loopback_by_default_ = false;
  // UCX_TCP_TX_SEG_SIZE where this transport set it (tcp_tx_seg_kb), else
  // empty.
  std::string tcp_tx_seg_;
  // The worker's event file descriptor (ucp_worker_get_efd; owned by the
  // worker) where it has the wakeup feature, else -1.
  int event_fd_ = -1;
  std::unique_ptr<ProcessIdentity> self_;  // Published in address_.
  std::shared_ptr<UcxContext> context_;  // Shared with memory regions.
  std::string address_;
  internal::NotificationQueue notifications_;
  // Our flag inbox and its reader, when we offer one.
  std::optional<MemoryRegion> inbox_;
  std::unique_ptr<FlagInboxReader> inbox_reader_;
  // The worker and what its endpoints share with it (ucx_internal.h).
  std::unique_ptr<UcxWorkerState> shared_;
  int64_t next_watch_ns_ = 0;  // CoarseMonotonicNanos()
};

// Registers "ucx" (parameters: tls, net_devices, keepalive_ms,
// max_outstanding, notify=flag|am).
absl::Status RegisterUcxTransport(TransportRegistry& registry);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_TRANSPORT_H_
